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

use std::collections::BTreeSet;
use std::fmt;
use std::path::Path;

use sluice_types::TableId;
use toml::{Table, Value};

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
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        SchedulerConfig {
            enable_table_across_nodes: false,
            region_threshold: 10_000,
            region_count_per_span: 100,
            balance: true,
            x_write_key_threshold: 0,
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

// ---------------------------------------------------------------------------------------------
// Implementation
// ---------------------------------------------------------------------------------------------

struct Parser {
    file: String,
}

/// Where an error is reported: the file's top level, `[world]`, or a step.
#[derive(Clone, Copy)]
enum Ctx<'a> {
    Top,
    Section(&'a str),
    Step(usize, &'a str),
}

impl Parser {
    fn err(&self, ctx: Ctx<'_>, message: impl Into<String>) -> ScenarioError {
        let message = message.into();
        match ctx {
            Ctx::Top => ScenarioError {
                file: self.file.clone(),
                step: None,
                message,
            },
            Ctx::Section(s) => ScenarioError {
                file: self.file.clone(),
                step: None,
                message: format!("{s}: {message}"),
            },
            Ctx::Step(n, op) => ScenarioError {
                file: self.file.clone(),
                step: Some(n),
                message: if op.is_empty() {
                    message
                } else {
                    format!("op \"{op}\": {message}")
                },
            },
        }
    }

    fn scenario(&self, text: &str) -> Result<Scenario, ScenarioError> {
        let root: Table = toml::from_str(text).map_err(|e| {
            self.err(
                Ctx::Top,
                format!("not valid TOML: {}", e.to_string().trim()),
            )
        })?;
        let mut top = Fields::new(self, Ctx::Top, root);
        let name = top.req_str("name")?;
        let description = top.opt_str("description")?;
        let world_tbl = top.req_table("world")?;
        let steps_val = top.take("step");
        top.finish()?;

        let world = self.world(world_tbl)?;
        let mut known: BTreeSet<TableId> = world.tables.iter().map(|t| t.id).collect();
        let mut steps = Vec::new();
        if let Some(v) = steps_val {
            let Value::Array(items) = v else {
                return Err(self.err(Ctx::Top, "`step` must be an array of tables ([[step]])"));
            };
            for (i, item) in items.into_iter().enumerate() {
                let number = i + 1;
                let Value::Table(t) = item else {
                    return Err(
                        self.err(Ctx::Step(number, ""), "a step must be a table ([[step]])")
                    );
                };
                let op = self.step(number, t, &world, &mut known)?;
                steps.push(Step { number, op });
            }
        }
        Ok(Scenario {
            file: self.file.clone(),
            name,
            description,
            world,
            steps,
        })
    }

    fn world(&self, tbl: Table) -> Result<World, ScenarioError> {
        let ctx = Ctx::Section("[world]");
        let mut w = Fields::new(self, ctx, tbl);
        let nodes_val = w
            .take("nodes")
            .ok_or_else(|| self.err(ctx, "missing field `nodes`"))?;
        let Value::Array(items) = nodes_val else {
            return Err(self.err(ctx, "`nodes` must be an array of node names"));
        };
        let mut nodes: Vec<String> = Vec::new();
        for item in items {
            let Value::String(n) = item else {
                return Err(self.err(ctx, "`nodes` must be an array of node names (strings)"));
            };
            if n.is_empty() || n.starts_with('@') || n == "meta" {
                return Err(self.err(
                    ctx,
                    format!("invalid node name {n:?} (empty, starting with '@', or the reserved \"meta\")"),
                ));
            }
            if nodes.contains(&n) {
                return Err(self.err(ctx, format!("node {n:?} is listed twice")));
            }
            nodes.push(n);
        }
        if nodes.is_empty() {
            return Err(self.err(ctx, "`nodes` must name at least one node"));
        }
        let maintainer = w.opt_str("maintainer")?;
        if let Some(m) = &maintainer {
            if !nodes.contains(m) {
                return Err(self.err(
                    ctx,
                    format!("`maintainer` names {m:?}, which is not in `nodes`"),
                ));
            }
        }
        let sink = match w.req_str("sink")?.as_str() {
            "storage" => SinkKind::Storage,
            "mysql" => SinkKind::Mysql,
            "blackhole" => SinkKind::Blackhole,
            other => {
                return Err(self.err(
                    ctx,
                    format!(
                        "`sink` must be \"storage\", \"mysql\" or \"blackhole\", not {other:?}"
                    ),
                ))
            }
        };
        let seed = w.opt_u64("seed")?.unwrap_or(0);
        let x_lease_ms = w.opt_u64("x-lease-ms")?;
        if x_lease_ms == Some(0) {
            return Err(self.err(ctx, "`x-lease-ms` must be positive"));
        }
        let x_memory_quota_bytes = w.opt_u64("x-memory-quota-bytes")?;
        let scheduler = match w.take("scheduler") {
            None => SchedulerConfig::default(),
            Some(Value::Table(t)) => self.scheduler(t)?,
            Some(_) => return Err(self.err(ctx, "`scheduler` must be a table ([world.scheduler])")),
        };
        let tables = match w.take("tables") {
            None => Vec::new(),
            Some(Value::Array(items)) => {
                let mut out: Vec<TableDef> = Vec::new();
                for (i, item) in items.into_iter().enumerate() {
                    let Value::Table(t) = item else {
                        return Err(self.err(
                            ctx,
                            "`tables` must be an array of tables ([[world.tables]])",
                        ));
                    };
                    let def = self.table_def(i + 1, t)?;
                    if out.iter().any(|o| o.id == def.id) {
                        return Err(self.err(
                            Ctx::Section("[[world.tables]]"),
                            format!("table id {} is declared twice", def.id),
                        ));
                    }
                    out.push(def);
                }
                out
            }
            Some(_) => {
                return Err(self.err(
                    ctx,
                    "`tables` must be an array of tables ([[world.tables]])",
                ))
            }
        };
        w.finish()?;
        Ok(World {
            nodes,
            maintainer,
            sink,
            seed,
            scheduler,
            tables,
            x_lease_ms,
            x_memory_quota_bytes,
        })
    }

    fn scheduler(&self, tbl: Table) -> Result<SchedulerConfig, ScenarioError> {
        let ctx = Ctx::Section("[world.scheduler]");
        let mut s = Fields::new(self, ctx, tbl);
        let d = SchedulerConfig::default();
        let cfg = SchedulerConfig {
            enable_table_across_nodes: s
                .opt_bool("enable-table-across-nodes")?
                .unwrap_or(d.enable_table_across_nodes),
            region_threshold: s.opt_u64("region-threshold")?.unwrap_or(d.region_threshold),
            region_count_per_span: s
                .opt_u64("region-count-per-span")?
                .unwrap_or(d.region_count_per_span),
            balance: s.opt_bool("balance")?.unwrap_or(d.balance),
            x_write_key_threshold: s
                .opt_u64("x-write-key-threshold")?
                .unwrap_or(d.x_write_key_threshold),
        };
        if cfg.region_count_per_span == 0 {
            return Err(self.err(ctx, "`region-count-per-span` must be positive"));
        }
        s.finish()?;
        Ok(cfg)
    }

    fn table_def(&self, index: usize, tbl: Table) -> Result<TableDef, ScenarioError> {
        let label = format!("[[world.tables]] #{index}");
        let ctx = Ctx::Section(&label);
        let mut t = Fields::new(self, ctx, tbl);
        let id = t.req_u64("id")?;
        if id == 0 {
            return Err(self.err(ctx, "`id` must be positive"));
        }
        let name = t.req_str("name")?;
        let name = qualified(&name).ok_or_else(|| {
            self.err(
                ctx,
                format!("`name` must be \"schema.table\", not {name:?}"),
            )
        })?;
        let regions = t.opt_u64("regions")?.unwrap_or(1);
        if regions == 0 {
            return Err(self.err(ctx, "`regions` must be at least 1"));
        }
        let rows = t.opt_u64("rows")?.unwrap_or(0);
        t.finish()?;
        Ok(TableDef {
            id: TableId(id),
            name,
            regions,
            rows,
        })
    }

    fn step(
        &self,
        number: usize,
        tbl: Table,
        world: &World,
        known: &mut BTreeSet<TableId>,
    ) -> Result<Op, ScenarioError> {
        let op_name = match tbl.get("op") {
            None => return Err(self.err(Ctx::Step(number, ""), "missing field `op`")),
            Some(Value::String(s)) => s.clone(),
            Some(_) => return Err(self.err(Ctx::Step(number, ""), "`op` must be a string")),
        };
        let ctx = Ctx::Step(number, &op_name);
        let mut f = Fields::new(self, ctx, tbl);
        f.take("op");
        let v = Validator {
            parser: self,
            ctx,
            world,
        };

        let op = match op_name.as_str() {
            "create_changefeed" => Op::CreateChangefeed {
                changefeed: f
                    .opt_str("changefeed")?
                    .unwrap_or_else(|| DEFAULT_CHANGEFEED.to_string()),
            },
            "run" => Op::Run {
                ms: f.req_u64("ms")?,
            },
            "settle" => Op::Settle {
                max_ms: f.opt_u64("max-ms")?.unwrap_or(DEFAULT_SETTLE_MAX_MS),
            },
            "write" => self.write_op(&mut f, &v, known)?,
            "ddl" => Op::Ddl(self.ddl(&mut f, &v, known)?),
            "split_table" => {
                let table = v.table(known, f.req_u64("table")?, "table")?;
                let spans = f.req_u64("spans")?;
                if spans == 0 {
                    return Err(self.err(ctx, "`spans` must be at least 1"));
                }
                Op::SplitTable { table, spans }
            }
            "merge_table" => Op::MergeTable {
                table: v.table(known, f.req_u64("table")?, "table")?,
            },
            "move_table" => Op::MoveTable {
                table: v.table(known, f.req_u64("table")?, "table")?,
                to: v.node(&f.req_str("to")?, "to")?,
            },
            "cordon" => Op::Cordon {
                node: v.node(&f.req_str("node")?, "node")?,
            },
            "uncordon" => Op::Uncordon {
                node: v.node(&f.req_str("node")?, "node")?,
            },
            "hold" | "release" => {
                let point = v.hold_point(&f.req_str("point")?, "point")?;
                let node = v.opt_node(f.opt_str("node")?, "node")?;
                if op_name == "hold" {
                    Op::Hold { point, node }
                } else {
                    Op::Release { point, node }
                }
            }
            "crash" => Op::Crash {
                node: v.node(&f.req_str("node")?, "node")?,
            },
            "restart" => Op::Restart {
                node: v.node(&f.req_str("node")?, "node")?,
            },
            "partition" => Op::Partition {
                groups: self.partition(&mut f, &v)?,
            },
            "heal" => Op::Heal,
            "faults" => Op::Faults(self.faults(&mut f, ctx)?),
            "expect" => self.expect(&mut f, &v, known)?,
            "x-move_maintainer" => Op::XMoveMaintainer {
                to: v.node(&f.req_str("to")?, "to")?,
            },
            x if x.starts_with("x-") => match self.x_op(x, &mut f, &v, known)? {
                Some(op) => op,
                None => {
                    return Err(self.err(Ctx::Step(number, ""), format!("unknown op {x:?}")));
                }
            },
            other => {
                return Err(self.err(Ctx::Step(number, ""), format!("unknown op {other:?}")));
            }
        };
        f.finish()?;
        Ok(op)
    }

    /// `write`: rows into a table, in transactions of `txn-rows`, some of them deletes.
    fn write_op(
        &self,
        f: &mut Fields<'_>,
        v: &Validator<'_>,
        known: &mut BTreeSet<TableId>,
    ) -> Result<Op, ScenarioError> {
        let table = v.table(known, f.req_u64("table")?, "table")?;
        let rows = f.req_u64("rows")?;
        let txn_rows = f.opt_u64("txn-rows")?.unwrap_or(1);
        if txn_rows == 0 {
            return Err(self.err(v.ctx, "`txn-rows` must be at least 1"));
        }
        let deletes = f.opt_u64("deletes")?.unwrap_or(0);
        Ok(Op::Write {
            table,
            rows,
            txn_rows,
            deletes,
        })
    }

    /// The extension ops (`x-…`); `None` for an unknown one.
    fn x_op(
        &self,
        name: &str,
        f: &mut Fields<'_>,
        v: &Validator<'_>,
        known: &mut BTreeSet<TableId>,
    ) -> Result<Option<Op>, ScenarioError> {
        let ctx = v.ctx;
        let op = match name {
            "x-sink_error" => {
                let node = v.opt_node(f.opt_str("node")?, "node")?;
                let table = match f.opt_u64("table")? {
                    Some(t) => Some(v.table(known, t, "table")?),
                    None => None,
                };
                let count = f.opt_u64("count")?.unwrap_or(1);
                if count == 0 {
                    return Err(self.err(ctx, "`count` must be at least 1"));
                }
                let retryable = f.opt_bool("retryable")?.unwrap_or(true);
                Op::XSinkError {
                    node,
                    table,
                    count,
                    retryable,
                }
            }
            "x-write_txn" => {
                let mut tables = Vec::new();
                for t in f.req_u64_list("tables")? {
                    tables.push(v.table(known, t, "tables")?);
                }
                let txns = f.opt_u64("txns")?.unwrap_or(1);
                let rows = f.req_u64("rows")?;
                if tables.is_empty() || txns == 0 || rows == 0 {
                    return Err(self.err(
                        ctx,
                        "`x-write_txn` needs at least one table, one transaction and one row",
                    ));
                }
                Op::XWriteTxn { tables, txns, rows }
            }
            "x-sink_latency" => Op::XSinkLatency {
                node: v.opt_node(f.opt_str("node")?, "node")?,
                table: v.table(known, f.req_u64("table")?, "table")?,
                ms: f.req_u64("ms")?,
            },
            "x-drop" => {
                let m = f.req_str("message")?;
                let message = MessageKind::parse(&m).ok_or_else(|| {
                    let names: Vec<&str> = MessageKind::ALL.iter().map(|(_, n)| *n).collect();
                    self.err(
                        ctx,
                        format!("unknown `message` kind {m:?} (one of {})", names.join(", ")),
                    )
                })?;
                let from = v.opt_node(f.opt_str("from")?, "from")?;
                let to = v.opt_node(f.opt_str("to")?, "to")?;
                let count = f.opt_u64("count")?.unwrap_or(1);
                if count == 0 {
                    return Err(self.err(ctx, "`count` must be at least 1"));
                }
                Op::XDrop {
                    message,
                    from,
                    to,
                    count,
                }
            }
            "x-pause" => Op::XPause {
                node: v.node(&f.req_str("node")?, "node")?,
                ms: f.req_u64("ms")?,
            },
            "x-pause_changefeed" => Op::XPauseChangefeed {
                changefeed: f
                    .opt_str("changefeed")?
                    .unwrap_or_else(|| DEFAULT_CHANGEFEED.to_string()),
            },
            "x-resume_changefeed" => Op::XResumeChangefeed {
                changefeed: f
                    .opt_str("changefeed")?
                    .unwrap_or_else(|| DEFAULT_CHANGEFEED.to_string()),
            },
            "x-drain" => Op::XDrain {
                node: v.node(&f.req_str("node")?, "node")?,
            },
            _ => return Ok(None),
        };
        Ok(Some(op))
    }

    fn ddl(
        &self,
        f: &mut Fields<'_>,
        v: &Validator<'_>,
        known: &mut BTreeSet<TableId>,
    ) -> Result<Ddl, ScenarioError> {
        let ctx = v.ctx;
        let kind = f.req_str("kind")?;
        let ddl = match kind.as_str() {
            "create_table" => {
                let id = f.req_u64("table")?;
                if id == 0 {
                    return Err(self.err(ctx, "`table` must be a positive table id"));
                }
                let table = TableId(id);
                if known.contains(&table) {
                    return Err(self.err(ctx, format!("table id {id} is already declared")));
                }
                let name = f.req_str("name")?;
                let name = qualified(&name).ok_or_else(|| {
                    self.err(ctx, format!("`name` must be \"schema.table\", not {name:?}"))
                })?;
                let regions = f.opt_u64("regions")?.unwrap_or(1);
                if regions == 0 {
                    return Err(self.err(ctx, "`regions` must be at least 1"));
                }
                known.insert(table);
                Ddl::CreateTable { table, name, regions }
            }
            "drop_table" => Ddl::DropTable { table: v.table(known, f.req_u64("table")?, "table")? },
            "truncate_table" => {
                let table = v.table(known, f.req_u64("table")?, "table")?;
                let id = f.req_u64("new-table")?;
                if id == 0 {
                    return Err(self.err(ctx, "`new-table` must be a positive table id"));
                }
                let new_table = TableId(id);
                if known.contains(&new_table) {
                    return Err(self.err(ctx, format!("`new-table` id {id} is already declared")));
                }
                known.insert(new_table);
                Ddl::TruncateTable { table, new_table }
            }
            "rename_table" => {
                let table = v.table(known, f.req_u64("table")?, "table")?;
                let n = f.req_str("new-name")?;
                let new_name = qualified(&n).ok_or_else(|| {
                    self.err(ctx, format!("`new-name` must be \"schema.table\", not {n:?}"))
                })?;
                Ddl::RenameTable { table, new_name }
            }
            "add_column" => Ddl::AddColumn { table: v.table(known, f.req_u64("table")?, "table")? },
            "create_database" => Ddl::CreateDatabase { database: database(self, ctx, f)? },
            "drop_database" => Ddl::DropDatabase { database: database(self, ctx, f)? },
            "x-create_view" => Ddl::XCreateView { database: database(self, ctx, f)? },
            other => {
                return Err(self.err(
                    ctx,
                    format!(
                        "unknown ddl `kind` {other:?} (one of create_table, drop_table, truncate_table, \
                         rename_table, add_column, create_database, drop_database, x-create_view)"
                    ),
                ))
            }
        };
        Ok(ddl)
    }

    fn partition(
        &self,
        f: &mut Fields<'_>,
        v: &Validator<'_>,
    ) -> Result<Vec<PartitionGroup>, ScenarioError> {
        let ctx = v.ctx;
        let bad = || self.err(ctx, "`groups` must be a list of lists of node names");
        let groups_val = f
            .take("groups")
            .ok_or_else(|| self.err(ctx, "missing field `groups`"))?;
        let Value::Array(outer) = groups_val else {
            return Err(bad());
        };
        let mut seen: BTreeSet<String> = BTreeSet::new();
        let mut meta_seen = false;
        let mut groups = Vec::new();
        for g in outer {
            let Value::Array(inner) = g else {
                return Err(bad());
            };
            let mut group = PartitionGroup {
                nodes: Vec::new(),
                meta: false,
            };
            for m in inner {
                let Value::String(name) = m else {
                    return Err(bad());
                };
                if name == "meta" {
                    if meta_seen {
                        return Err(self.err(ctx, "\"meta\" may appear in only one group"));
                    }
                    meta_seen = true;
                    group.meta = true;
                    continue;
                }
                if !v.world.nodes.contains(&name) {
                    return Err(self.err(
                        ctx,
                        format!("`groups` names node {name:?}, which is not in the world"),
                    ));
                }
                if !seen.insert(name.clone()) {
                    return Err(self.err(
                        ctx,
                        format!("node {name:?} appears in more than one place in `groups`"),
                    ));
                }
                group.nodes.push(name);
            }
            groups.push(group);
        }
        Ok(groups)
    }

    fn faults(&self, f: &mut Fields<'_>, ctx: Ctx<'_>) -> Result<Faults, ScenarioError> {
        let drop = f.opt_ratio("drop")?.unwrap_or(0.0);
        let duplicate = f.opt_ratio("duplicate")?.unwrap_or(0.0);
        let reorder = f.opt_bool("reorder")?.unwrap_or(false);
        let delay_ms = match f.take("delay-ms") {
            None => (0, 0),
            Some(Value::Array(a)) => {
                let nums: Vec<u64> = a
                    .iter()
                    .filter_map(|x| match x {
                        Value::Integer(i) if *i >= 0 => u64::try_from(*i).ok(),
                        _ => None,
                    })
                    .collect();
                if nums.len() != 2 || a.len() != 2 {
                    return Err(self.err(
                        ctx,
                        "`delay-ms` must be [min, max] with non-negative integers",
                    ));
                }
                if nums[0] > nums[1] {
                    return Err(self.err(ctx, "`delay-ms` must be [min, max] with min <= max"));
                }
                (nums[0], nums[1])
            }
            Some(_) => {
                return Err(self.err(
                    ctx,
                    "`delay-ms` must be [min, max] with non-negative integers",
                ))
            }
        };
        Ok(Faults {
            drop,
            duplicate,
            reorder,
            delay_ms,
        })
    }

    fn expect(
        &self,
        f: &mut Fields<'_>,
        v: &Validator<'_>,
        known: &BTreeSet<TableId>,
    ) -> Result<Op, ScenarioError> {
        let ctx = v.ctx;
        let key = self.expect_key(f, ctx)?;
        let within_ms = f.opt_u64("within-ms")?;
        let condition = match key {
            "spans" | "spans-at-least" | "spans-at-most" => {
                let table = self.expect_table(f, v, known, key)?;
                let n = f.req_u64(key)?;
                let count = match key {
                    "spans" => SpanCount::Exactly(n),
                    "spans-at-least" => SpanCount::AtLeast(n),
                    _ => SpanCount::AtMost(n),
                };
                Condition::Spans { table, count }
            }
            "on" => {
                let table = self.expect_table(f, v, known, key)?;
                Condition::On {
                    table,
                    node: v.node(&f.req_str("on")?, "on")?,
                }
            }
            "absent" => {
                let table = self.expect_table(f, v, known, key)?;
                self.expect_true(f, ctx, "absent")?;
                Condition::Absent { table }
            }
            "check" => Condition::Check(self.expect_check(f, v)?),
            "maintainer-not-on" => Condition::MaintainerNotOn(
                v.node(&f.req_str("maintainer-not-on")?, "maintainer-not-on")?,
            ),
            "maintainer-ready" => {
                self.expect_true(f, ctx, "maintainer-ready")?;
                Condition::MaintainerReady
            }
            "held" => self.expect_held(f, v, known)?,
            _ => {
                self.expect_true(f, ctx, "checkpoint-advanced")?;
                Condition::CheckpointAdvanced
            }
        };
        // Fields such as `table` or `node` given to a condition that does not take them are
        // reported as unknown fields by `finish`.
        Ok(Op::Expect {
            condition,
            within_ms,
        })
    }

    /// The one condition an `expect` step gives (none or more than one is an error).
    fn expect_key(&self, f: &Fields<'_>, ctx: Ctx<'_>) -> Result<&'static str, ScenarioError> {
        let present: Vec<&'static str> = EXPECT_CONDITIONS
            .iter()
            .copied()
            .filter(|k| f.has(k))
            .collect();
        match present.len() {
            0 => Err(self.err(
                ctx,
                format!(
                    "no condition (expected exactly one of {})",
                    EXPECT_CONDITIONS.join(", ")
                ),
            )),
            1 => Ok(present[0]),
            _ => Err(self.err(
                ctx,
                format!(
                    "more than one condition in one expect ({}); use one step each",
                    present.join(", ")
                ),
            )),
        }
    }

    /// The `table` a condition `key` requires.
    fn expect_table(
        &self,
        f: &mut Fields<'_>,
        v: &Validator<'_>,
        known: &BTreeSet<TableId>,
        key: &str,
    ) -> Result<TableId, ScenarioError> {
        let id = f.take_u64("table")?.ok_or_else(|| {
            self.err(
                v.ctx,
                format!("missing field `table` (required with `{key}`)"),
            )
        })?;
        v.table(known, id, "table")
    }

    /// A condition `key = true` (the only value it takes).
    fn expect_true(
        &self,
        f: &mut Fields<'_>,
        ctx: Ctx<'_>,
        key: &str,
    ) -> Result<(), ScenarioError> {
        if !f.req_bool(key)? {
            return Err(self.err(ctx, format!("`{key}` must be true")));
        }
        Ok(())
    }

    /// `check = "..."`: a named global check.
    fn expect_check(&self, f: &mut Fields<'_>, v: &Validator<'_>) -> Result<Check, ScenarioError> {
        let ctx = v.ctx;
        let c = f.req_str("check")?;
        match c.as_str() {
            "converged" => Ok(Check::Converged),
            "sink-matches-upstream" => {
                if v.world.sink == SinkKind::Blackhole {
                    return Err(self.err(ctx, "check \"sink-matches-upstream\" is invalid with the blackhole sink"));
                }
                Ok(Check::SinkMatchesUpstream)
            }
            "changefeed-normal" => Ok(Check::ChangefeedNormal),
            other => Err(self.err(
                ctx,
                format!(
                    "unknown check {other:?} (one of converged, sink-matches-upstream, changefeed-normal)"
                ),
            )),
        }
    }

    /// `held` (+ optional `node`, `table`).
    fn expect_held(
        &self,
        f: &mut Fields<'_>,
        v: &Validator<'_>,
        known: &BTreeSet<TableId>,
    ) -> Result<Condition, ScenarioError> {
        let point = v.hold_point(&f.req_str("held")?, "held")?;
        let node = v.opt_node(f.opt_str("node")?, "node")?;
        let table = match f.take_u64("table")? {
            Some(t) => Some(v.table(known, t, "table")?),
            None => None,
        };
        Ok(Condition::Held { point, node, table })
    }
}

/// The conditions of an `expect` step, in the order errors list them.
const EXPECT_CONDITIONS: [&str; 10] = [
    "spans",
    "spans-at-least",
    "spans-at-most",
    "on",
    "absent",
    "check",
    "maintainer-not-on",
    "maintainer-ready",
    "held",
    "checkpoint-advanced",
];

fn database(p: &Parser, ctx: Ctx<'_>, f: &mut Fields<'_>) -> Result<String, ScenarioError> {
    let d = f.req_str("database")?;
    if d.is_empty() || d.contains('.') {
        return Err(p.err(
            ctx,
            format!("`database` must be a non-empty name without '.', not {d:?}"),
        ));
    }
    Ok(d)
}

fn qualified(s: &str) -> Option<QualifiedName> {
    let (schema, table) = s.split_once('.')?;
    if schema.is_empty() || table.is_empty() || table.contains('.') {
        return None;
    }
    Some(QualifiedName {
        schema: schema.to_string(),
        table: table.to_string(),
    })
}

/// Cross-checks of values against the world and the tables declared so far.
struct Validator<'a> {
    parser: &'a Parser,
    ctx: Ctx<'a>,
    world: &'a World,
}

impl Validator<'_> {
    /// [`Self::node`] of an optional field.
    fn opt_node(&self, s: Option<String>, field: &str) -> Result<Option<NodeRef>, ScenarioError> {
        s.map(|s| self.node(&s, field)).transpose()
    }

    fn node(&self, s: &str, field: &str) -> Result<NodeRef, ScenarioError> {
        match s {
            "@maintainer" => Ok(NodeRef::Maintainer),
            "@coordinator" => Ok(NodeRef::Coordinator),
            "@ddl-writer" => Ok(NodeRef::DdlWriter),
            _ if s.starts_with('@') => Err(self.parser.err(
                self.ctx,
                format!("`{field}`: unknown alias {s:?} (one of @maintainer, @coordinator, @ddl-writer)"),
            )),
            _ if self.world.nodes.iter().any(|n| n == s) => Ok(NodeRef::Name(s.to_string())),
            _ => Err(self.parser.err(
                self.ctx,
                format!("`{field}` names node {s:?}, which is not in the world ({})", self.world.nodes.join(", ")),
            )),
        }
    }

    fn table(
        &self,
        known: &BTreeSet<TableId>,
        id: u64,
        field: &str,
    ) -> Result<TableId, ScenarioError> {
        let t = TableId(id);
        if known.contains(&t) {
            Ok(t)
        } else {
            Err(self.parser.err(
                self.ctx,
                format!("`{field}` = {id}: no such table (neither the world nor an earlier ddl step declares it)"),
            ))
        }
    }

    fn hold_point(&self, s: &str, field: &str) -> Result<HoldPoint, ScenarioError> {
        HoldPoint::parse(s).ok_or_else(|| {
            let names: Vec<&str> = HoldPoint::ALL.iter().map(|(_, n)| *n).collect();
            self.parser.err(
                self.ctx,
                format!(
                    "`{field}`: unknown hold point {s:?} (one of {})",
                    names.join(", ")
                ),
            )
        })
    }
}

/// A TOML table whose fields are consumed one by one; leftovers are unknown fields.
struct Fields<'a> {
    parser: &'a Parser,
    ctx: Ctx<'a>,
    tbl: Table,
}

impl<'a> Fields<'a> {
    fn new(parser: &'a Parser, ctx: Ctx<'a>, tbl: Table) -> Self {
        Fields { parser, ctx, tbl }
    }

    fn err(&self, m: String) -> ScenarioError {
        self.parser.err(self.ctx, m)
    }

    fn has(&self, key: &str) -> bool {
        self.tbl.contains_key(key)
    }

    fn take(&mut self, key: &str) -> Option<Value> {
        self.tbl.remove(key)
    }

    fn finish(self) -> Result<(), ScenarioError> {
        if self.tbl.is_empty() {
            return Ok(());
        }
        let list: Vec<String> = self.tbl.keys().map(|k| format!("`{k}`")).collect();
        let plural = if list.len() > 1 { "s" } else { "" };
        Err(self.err(format!("unknown field{plural} {}", list.join(", "))))
    }

    fn take_u64(&mut self, key: &str) -> Result<Option<u64>, ScenarioError> {
        match self.take(key) {
            None => Ok(None),
            Some(Value::Integer(i)) if i >= 0 => Ok(Some(i as u64)),
            Some(Value::Integer(i)) => {
                Err(self.err(format!("`{key}` must be a non-negative integer, not {i}")))
            }
            Some(other) => Err(self.err(format!(
                "`{key}` must be a non-negative integer, not a {}",
                other.type_str()
            ))),
        }
    }

    fn opt_u64(&mut self, key: &str) -> Result<Option<u64>, ScenarioError> {
        self.take_u64(key)
    }

    fn req_u64_list(&mut self, key: &str) -> Result<Vec<u64>, ScenarioError> {
        match self.take(key) {
            None => Err(self.err(format!("missing field `{key}`"))),
            Some(Value::Array(items)) => items
                .into_iter()
                .map(|i| match i {
                    Value::Integer(n) if n >= 0 => Ok(n as u64),
                    other => Err(self.err(format!(
                        "`{key}` must be an array of non-negative integers, not one holding {other}"
                    ))),
                })
                .collect(),
            Some(other) => Err(self.err(format!(
                "`{key}` must be an array of non-negative integers, not a {}",
                other.type_str()
            ))),
        }
    }

    fn req_u64(&mut self, key: &str) -> Result<u64, ScenarioError> {
        self.take_u64(key)?
            .ok_or_else(|| self.err(format!("missing field `{key}`")))
    }

    fn opt_str(&mut self, key: &str) -> Result<Option<String>, ScenarioError> {
        match self.take(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(other) => Err(self.err(format!(
                "`{key}` must be a string, not a {}",
                other.type_str()
            ))),
        }
    }

    fn req_str(&mut self, key: &str) -> Result<String, ScenarioError> {
        self.opt_str(key)?
            .ok_or_else(|| self.err(format!("missing field `{key}`")))
    }

    fn opt_bool(&mut self, key: &str) -> Result<Option<bool>, ScenarioError> {
        match self.take(key) {
            None => Ok(None),
            Some(Value::Boolean(b)) => Ok(Some(b)),
            Some(other) => Err(self.err(format!(
                "`{key}` must be a boolean, not a {}",
                other.type_str()
            ))),
        }
    }

    fn req_bool(&mut self, key: &str) -> Result<bool, ScenarioError> {
        self.opt_bool(key)?
            .ok_or_else(|| self.err(format!("missing field `{key}`")))
    }

    fn opt_ratio(&mut self, key: &str) -> Result<Option<f64>, ScenarioError> {
        let x = match self.take(key) {
            None => return Ok(None),
            Some(Value::Float(x)) => x,
            Some(Value::Integer(i)) => i as f64,
            Some(other) => {
                return Err(self.err(format!(
                    "`{key}` must be a ratio between 0 and 1, not a {}",
                    other.type_str()
                )))
            }
        };
        if !(0.0..=1.0).contains(&x) {
            return Err(self.err(format!("`{key}` must be a ratio between 0 and 1, not {x}")));
        }
        Ok(Some(x))
    }

    fn req_table(&mut self, key: &str) -> Result<Table, ScenarioError> {
        match self.take(key) {
            None => Err(self.err(format!("missing table `[{key}]`"))),
            Some(Value::Table(t)) => Ok(t),
            Some(other) => Err(self.err(format!(
                "`{key}` must be a table, not a {}",
                other.type_str()
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    /// `scenarios/contract` of the workspace: the contract's example scenarios.
    fn contract_dir() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/contract")
    }

    /// `scenarios/catalog` of the workspace (`SLUICE_CATALOG_DIR` overrides it).
    fn catalog_dir() -> PathBuf {
        match std::env::var_os("SLUICE_CATALOG_DIR") {
            Some(d) => PathBuf::from(d),
            None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/catalog"),
        }
    }

    fn toml_files(dir: &Path) -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
            .map(|rd| rd.filter_map(|e| e.ok()).map(|e| e.path()).collect())
            .unwrap_or_default();
        v.retain(|p| p.extension().is_some_and(|e| e == "toml"));
        v.sort();
        v
    }

    const HEAD: &str = r#"
name = "t"
[world]
nodes = ["n1", "n2"]
sink = "mysql"
[[world.tables]]
id = 1
name = "db.a"
"#;

    fn with_steps(steps: &str) -> Result<Scenario, ScenarioError> {
        parse_str("test.toml", &format!("{HEAD}\n{steps}"))
    }

    /// Asserts that parsing fails at `step` with a message containing `needle`.
    fn fails_at(steps: &str, step: usize, needle: &str) {
        match with_steps(steps) {
            Ok(s) => panic!("expected an error at step {step}, parsed {:?}", s.steps),
            Err(e) => {
                let text = e.to_string();
                assert_eq!(e.step, Some(step), "wrong step in {text}");
                assert!(
                    text.starts_with("test.toml: step "),
                    "file not named: {text}"
                );
                assert!(
                    text.contains(needle),
                    "{text:?} does not contain {needle:?}"
                );
            }
        }
    }

    #[test]
    fn contract_examples_parse() {
        let files = toml_files(&contract_dir());
        assert!(
            !files.is_empty(),
            "no contract scenarios in scenarios/contract"
        );
        for f in files {
            if let Err(e) = parse_file(&f) {
                panic!("{e}");
            }
        }
    }

    #[test]
    fn catalog_files_parse() {
        let files = toml_files(&catalog_dir());
        assert!(files.len() >= 20, "catalog has {} files", files.len());
        for f in files {
            let s = match parse_file(&f) {
                Ok(s) => s,
                Err(e) => panic!("{e}"),
            };
            let base = f
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default()
                .to_string();
            let nn = &base[..2];
            assert!(
                base.as_bytes()[2] == b'-' && nn.bytes().all(|b| b.is_ascii_digit()),
                "{base}"
            );
            let nn: u32 = nn.parse().unwrap_or(0);
            assert!(
                s.name.starts_with(&format!("catalog #{nn}:")),
                "{base}: name {:?}",
                s.name
            );
            assert!(
                s.description.as_deref().is_some_and(|d| d.len() > 40),
                "{base}: description"
            );
            // Every catalog file ends with settle + the final checks.
            let last_settle = s
                .steps
                .iter()
                .rposition(|st| matches!(st.op, Op::Settle { .. }));
            assert!(last_settle.is_some(), "{base}: no settle");
            let has = |c: Check| {
                s.steps.iter().any(|st| matches!(&st.op, Op::Expect { condition: Condition::Check(x), .. } if *x == c))
            };
            assert!(has(Check::Converged), "{base}: no converged check");
            if s.world.sink != SinkKind::Blackhole {
                assert!(
                    has(Check::SinkMatchesUpstream),
                    "{base}: no sink-matches-upstream"
                );
            }
            assert!(
                matches!(
                    s.steps.last().map(|st| &st.op),
                    Some(Op::Expect {
                        condition: Condition::Check(_),
                        ..
                    })
                ),
                "{base}: must end with a check"
            );
        }
    }

    #[test]
    fn defaults_applied() {
        let s = parse_str(
            "d.toml",
            r#"
name = "defaults"
[world]
nodes = ["a"]
sink = "storage"
[[world.tables]]
id = 7
name = "x.y"
[[step]]
op = "create_changefeed"
[[step]]
op = "settle"
[[step]]
op = "write"
table = 7
rows = 3
[[step]]
op = "hold"
point = "sink_flush"
[[step]]
op = "faults"
drop = 0.5
[[step]]
op = "x-sink_error"
[[step]]
op = "x-drop"
message = "heartbeat"
"#,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.world.seed, 0);
        assert_eq!(s.world.maintainer, None);
        assert_eq!(s.world.x_lease_ms, None);
        assert_eq!(s.world.scheduler, SchedulerConfig::default());
        assert!(!s.world.scheduler.enable_table_across_nodes);
        assert_eq!(s.world.scheduler.region_threshold, 10_000);
        assert_eq!(s.world.scheduler.region_count_per_span, 100);
        assert!(s.world.scheduler.balance);
        assert_eq!(s.world.tables[0].regions, 1);
        assert_eq!(s.world.tables[0].rows, 0);
        assert_eq!(s.world.tables[0].name.to_string(), "x.y");
        assert!(
            matches!(&s.steps[0].op, Op::CreateChangefeed { changefeed } if changefeed == "cf")
        );
        assert!(matches!(s.steps[1].op, Op::Settle { max_ms: 120_000 }));
        assert!(matches!(
            s.steps[2].op,
            Op::Write {
                rows: 3,
                txn_rows: 1,
                deletes: 0,
                ..
            }
        ));
        assert!(matches!(
            s.steps[3].op,
            Op::Hold {
                point: HoldPoint::SinkFlush,
                node: None
            }
        ));
        match &s.steps[4].op {
            Op::Faults(f) => {
                assert_eq!(f.drop, 0.5);
                assert_eq!(f.duplicate, 0.0);
                assert!(!f.reorder);
                assert_eq!(f.delay_ms, (0, 0));
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            s.steps[5].op,
            Op::XSinkError {
                node: None,
                table: None,
                count: 1,
                retryable: true
            }
        ));
        assert!(matches!(
            s.steps[6].op,
            Op::XDrop {
                message: MessageKind::Heartbeat,
                from: None,
                to: None,
                count: 1
            }
        ));
        assert_eq!(s.steps[6].number, 7);
    }

    #[test]
    fn every_form_parses() {
        let s = with_steps(
            r#"
[[step]]
op = "create_changefeed"
changefeed = "feed"
[[step]]
op = "run"
ms = 10
[[step]]
op = "settle"
max-ms = 5
[[step]]
op = "write"
table = 1
rows = 10
txn-rows = 3
deletes = 2
[[step]]
op = "ddl"
kind = "create_table"
table = 2
name = "db.b"
regions = 4
[[step]]
op = "ddl"
kind = "truncate_table"
table = 2
new-table = 3
[[step]]
op = "ddl"
kind = "rename_table"
table = 3
new-name = "db2.c"
[[step]]
op = "ddl"
kind = "add_column"
table = 3
[[step]]
op = "ddl"
kind = "drop_table"
table = 1
[[step]]
op = "ddl"
kind = "create_database"
database = "db3"
[[step]]
op = "ddl"
kind = "drop_database"
database = "db3"
[[step]]
op = "ddl"
kind = "x-create_view"
database = "db2"
[[step]]
op = "split_table"
table = 3
spans = 2
[[step]]
op = "merge_table"
table = 3
[[step]]
op = "move_table"
table = 3
to = "@maintainer"
[[step]]
op = "cordon"
node = "n1"
[[step]]
op = "uncordon"
node = "@coordinator"
[[step]]
op = "release"
point = "ddl_after_pass"
node = "n2"
[[step]]
op = "crash"
node = "@ddl-writer"
[[step]]
op = "restart"
node = "n1"
[[step]]
op = "partition"
groups = [["n1", "meta"], ["n2"]]
[[step]]
op = "heal"
[[step]]
op = "faults"
drop = 0
duplicate = 1
reorder = true
delay-ms = [1, 20]
[[step]]
op = "expect"
table = 3
spans-at-most = 4
within-ms = 100
[[step]]
op = "expect"
table = 3
on = "n2"
[[step]]
op = "expect"
table = 1
absent = true
[[step]]
op = "expect"
maintainer-not-on = "n1"
[[step]]
op = "expect"
maintainer-ready = true
[[step]]
op = "expect"
held = "create_dispatcher"
node = "n1"
table = 3
[[step]]
op = "expect"
checkpoint-advanced = true
[[step]]
op = "expect"
check = "sink-matches-upstream"
[[step]]
op = "x-move_maintainer"
to = "n2"
[[step]]
op = "x-sink_error"
node = "n2"
table = 3
count = 2
retryable = false
[[step]]
op = "x-drop"
message = "bootstrap_response"
from = "n2"
to = "@maintainer"
count = 3
[[step]]
op = "x-pause"
node = "n1"
ms = 100
[[step]]
op = "x-pause_changefeed"
[[step]]
op = "x-resume_changefeed"
[[step]]
op = "x-drain"
node = "n2"
[[step]]
op = "x-sink_latency"
table = 3
ms = 20000
"#,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.steps.len(), 39);
        assert!(matches!(
            &s.steps[38].op,
            Op::XSinkLatency {
                node: None,
                ms: 20000,
                ..
            }
        ));
        match &s.steps[20].op {
            Op::Partition { groups } => {
                assert_eq!(groups.len(), 2);
                assert!(groups[0].meta && !groups[1].meta);
                assert_eq!(groups[0].nodes, vec!["n1".to_string()]);
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            &s.steps[23].op,
            Op::Expect {
                condition: Condition::Spans {
                    count: SpanCount::AtMost(4),
                    ..
                },
                within_ms: Some(100)
            }
        ));
        assert!(matches!(
            &s.steps[18].op,
            Op::Crash {
                node: NodeRef::DdlWriter
            }
        ));
    }

    #[test]
    fn world_x_lease_ms() {
        let s = parse_str(
            "l.toml",
            "name = \"l\"\n[world]\nnodes = [\"a\"]\nsink = \"blackhole\"\nx-lease-ms = 5000\nseed = 9\n",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.world.x_lease_ms, Some(5000));
        assert_eq!(s.world.seed, 9);
        assert!(s.steps.is_empty());
    }

    #[test]
    fn unknown_op_is_an_error() {
        fails_at(
            "[[step]]\nop = \"settle\"\n[[step]]\nop = \"explode\"\n",
            2,
            "unknown op \"explode\"",
        );
        fails_at("[[step]]\nop = \"x-unknown\"\n", 1, "unknown op");
        fails_at("[[step]]\nms = 3\n", 1, "missing field `op`");
    }

    #[test]
    fn unknown_field_is_an_error() {
        fails_at(
            "[[step]]\nop = \"run\"\nms = 3\nspeed = 2\n",
            1,
            "unknown field `speed`",
        );
        fails_at(
            "[[step]]\nop = \"heal\"\nnode = \"n1\"\n",
            1,
            "unknown field `node`",
        );
        fails_at(
            "[[step]]\nop = \"expect\"\ncheck = \"converged\"\ntable = 1\n",
            1,
            "unknown field `table`",
        );
        fails_at(
            "[[step]]\nop = \"ddl\"\nkind = \"drop_table\"\ntable = 1\nname = \"db.a\"\n",
            1,
            "unknown field `name`",
        );
    }

    #[test]
    fn missing_or_ill_typed_field_is_an_error() {
        fails_at("[[step]]\nop = \"run\"\n", 1, "missing field `ms`");
        fails_at(
            "[[step]]\nop = \"run\"\nms = \"10\"\n",
            1,
            "`ms` must be a non-negative integer",
        );
        fails_at("[[step]]\nop = \"run\"\nms = -1\n", 1, "non-negative");
        fails_at(
            "[[step]]\nop = \"write\"\ntable = 1\n",
            1,
            "missing field `rows`",
        );
        fails_at(
            "[[step]]\nop = \"hold\"\npoint = \"nap\"\n",
            1,
            "unknown hold point",
        );
        fails_at("[[step]]\nop = \"faults\"\ndrop = 1.5\n", 1, "ratio");
        fails_at(
            "[[step]]\nop = \"faults\"\ndelay-ms = [5, 1]\n",
            1,
            "min <= max",
        );
        fails_at(
            "[[step]]\nop = \"ddl\"\nkind = \"explode_table\"\n",
            1,
            "unknown ddl `kind`",
        );
        fails_at(
            "[[step]]\nop = \"ddl\"\nkind = \"rename_table\"\ntable = 1\nnew-name = \"nodot\"\n",
            1,
            "schema.table",
        );
        fails_at(
            "[[step]]\nop = \"expect\"\nmaintainer-ready = false\n",
            1,
            "must be true",
        );
        fails_at(
            "[[step]]\nop = \"x-drop\"\nmessage = \"gossip\"\n",
            1,
            "unknown `message` kind",
        );
        fails_at(
            "[[step]]\nop = \"x-sink_error\"\ncount = 0\n",
            1,
            "at least 1",
        );
        fails_at("[[step]]\nop = \"x-sink_latency\"\ntable = 1\n", 1, "ms");
    }

    #[test]
    fn expect_needs_exactly_one_condition() {
        fails_at(
            "[[step]]\nop = \"expect\"\ntable = 1\nspans = 1\non = \"n1\"\n",
            1,
            "more than one condition",
        );
        fails_at(
            "[[step]]\nop = \"expect\"\ncheck = \"converged\"\nmaintainer-ready = true\n",
            1,
            "more than one condition",
        );
        fails_at(
            "[[step]]\nop = \"expect\"\nwithin-ms = 5\n",
            1,
            "no condition",
        );
        fails_at(
            "[[step]]\nop = \"expect\"\nspans = 1\n",
            1,
            "missing field `table`",
        );
        fails_at(
            "[[step]]\nop = \"expect\"\ncheck = \"fine\"\n",
            1,
            "unknown check",
        );
    }

    #[test]
    fn unknown_node_is_an_error() {
        fails_at(
            "[[step]]\nop = \"crash\"\nnode = \"n9\"\n",
            1,
            "\"n9\", which is not in the world",
        );
        fails_at(
            "[[step]]\nop = \"move_table\"\ntable = 1\nto = \"n3\"\n",
            1,
            "not in the world",
        );
        fails_at(
            "[[step]]\nop = \"partition\"\ngroups = [[\"n1\"], [\"n7\"]]\n",
            1,
            "not in the world",
        );
        fails_at(
            "[[step]]\nop = \"partition\"\ngroups = [[\"n1\"], [\"n1\"]]\n",
            1,
            "more than one place",
        );
        fails_at(
            "[[step]]\nop = \"crash\"\nnode = \"@leader\"\n",
            1,
            "unknown alias",
        );
        fails_at(
            "[[step]]\nop = \"expect\"\nmaintainer-not-on = \"zz\"\n",
            1,
            "not in the world",
        );
        let e = parse_str(
            "w.toml",
            "name = \"x\"\n[world]\nnodes = [\"a\"]\nmaintainer = \"b\"\nsink = \"mysql\"\n",
        )
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
        assert!(e.contains("w.toml") && e.contains("not in `nodes`"), "{e}");
    }

    #[test]
    fn undeclared_table_is_an_error() {
        fails_at(
            "[[step]]\nop = \"write\"\ntable = 2\nrows = 1\n",
            1,
            "no such table",
        );
        // Declared by an earlier ddl: fine; used before its ddl: error.
        fails_at(
            "[[step]]\nop = \"write\"\ntable = 5\nrows = 1\n[[step]]\nop = \"ddl\"\nkind = \"create_table\"\ntable = 5\nname = \"db.e\"\n",
            1,
            "no such table",
        );
        assert!(with_steps(
            "[[step]]\nop = \"ddl\"\nkind = \"truncate_table\"\ntable = 1\nnew-table = 9\n[[step]]\nop = \"write\"\ntable = 9\nrows = 1\n[[step]]\nop = \"expect\"\ntable = 1\nabsent = true\n"
        )
        .is_ok());
        fails_at(
            "[[step]]\nop = \"ddl\"\nkind = \"create_table\"\ntable = 1\nname = \"db.z\"\n",
            1,
            "already declared",
        );
        fails_at(
            "[[step]]\nop = \"expect\"\nheld = \"sink_flush\"\ntable = 4\n",
            1,
            "no such table",
        );
    }

    #[test]
    fn sink_matches_upstream_invalid_with_blackhole() {
        let e = parse_str(
            "b.toml",
            "name = \"b\"\n[world]\nnodes = [\"a\"]\nsink = \"blackhole\"\n[[step]]\nop = \"settle\"\n[[step]]\nop = \"expect\"\ncheck = \"sink-matches-upstream\"\n",
        )
        .err();
        assert_eq!(e.as_ref().and_then(|e| e.step), Some(2), "{e:?}");
    }

    #[test]
    fn world_errors_name_the_file() {
        for (text, needle) in [
            ("name = \"x\"\n[world]\nnodes = [\"a\"]\n", "missing field `sink`"),
            ("name = \"x\"\n[world]\nnodes = [\"a\"]\nsink = \"kafka\"\n", "`sink` must be"),
            ("name = \"x\"\n[world]\nnodes = [\"a\"]\nsink = \"mysql\"\ncolor = 1\n", "unknown field `color`"),
            ("name = \"x\"\n[world]\nnodes = [\"a\"]\nsink = \"mysql\"\n[world.scheduler]\nbalance = 1\n", "boolean"),
            (
                "name = \"x\"\n[world]\nnodes = [\"a\"]\nsink = \"mysql\"\n[world.scheduler]\nregion_threshold = 1\n",
                "unknown field `region_threshold`",
            ),
            (
                "name = \"x\"\n[world]\nnodes = [\"a\"]\nsink = \"mysql\"\n[[world.tables]]\nid = 1\nname = \"a.b\"\n[[world.tables]]\nid = 1\nname = \"a.c\"\n",
                "declared twice",
            ),
            ("[world]\nnodes = [\"a\"]\nsink = \"mysql\"\n", "missing field `name`"),
            ("name = \"x\"\nextra = 1\n[world]\nnodes = [\"a\"]\nsink = \"mysql\"\n", "unknown field `extra`"),
            ("name = \"x\"\n[world\n", "not valid TOML"),
        ] {
            let e = parse_str("bad.toml", text).err().map(|e| e.to_string()).unwrap_or_default();
            assert!(e.starts_with("bad.toml: ") && e.contains(needle), "{e:?} lacks {needle:?}");
        }
    }
}
