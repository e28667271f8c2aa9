//! Control messages exchanged between nodes. Every scheduling message carries the maintainer
//! epoch; every coordinator message carries the coordinator's leadership revision. Delivery is
//! best effort: every protocol here is idempotent and resent until observed.

use crate::config::ChangefeedConfig;
use serde::{Deserialize, Serialize};
use sluice_types::{ChangefeedId, DispatcherId, Epoch, Key, NodeId, Span, Ts};

/// Why a dispatcher is being closed: the intent survives a maintainer failover because the
/// dispatcher manager keeps it and reports it at bootstrap.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ClosePurpose {
    Remove,
    Move {
        dest: NodeId,
    },
    Split {
        points: Vec<Key>,
    },
    /// A merge source; the target is the dispatcher with this id.
    MergeInto {
        target: DispatcherId,
    },
}

/// A dispatcher's lifecycle as its manager reports it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum DispatcherPhase {
    /// Accepted, not started (held at `create_dispatcher`, or a merge target waiting for its
    /// sources to close).
    Creating,
    Working,
    /// Closing; it may still have writes in flight.
    Closing(ClosePurpose),
    /// Closed: no write of it can land any more. Reported once, then forgotten.
    Stopped,
}

/// A dispatcher's position at a blocking DDL.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum BlockStage {
    /// Flushed everything before the DDL and waits for Write or Pass.
    Waiting,
    /// Told to write; the write is under way.
    Writing,
    /// Written and durable; waits for the maintainer's Proceed.
    Written,
    /// Passed (told to skip it); reported once, for bookkeeping.
    Passed,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockReport {
    pub ddl_ts: Ts,
    pub stage: BlockStage,
    pub ddl: Option<sluice_types::DdlInfluence>,
}

/// One dispatcher as its manager sees it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DispatcherReport {
    pub id: DispatcherId,
    pub span: Span,
    pub is_trigger: bool,
    pub phase: DispatcherPhase,
    /// Everything of this span at or below this ts is durable in the sink.
    pub checkpoint: Ts,
    pub block: Option<BlockReport>,
    /// For a merge target: the sources it replaces.
    pub merge_sources: Vec<DispatcherId>,
    /// Rows written per second over the last heartbeat interval.
    #[serde(default)]
    pub write_rate: u64,
    /// Everything of this span at or below this ts has reached the dispatcher (its resolved ts).
    #[serde(default)]
    pub resolved: Ts,
    /// Its snapshot copy, if it copies (or copied) its span.
    #[serde(default)]
    pub copy: Option<CopyReport>,
    /// It rests: a working span dispatcher with nothing to do but follow its resolved ts (no
    /// rows in flight, no DDL, no copy, no merge, nothing written in the last interval). From
    /// this report on, until a later one says otherwise, its checkpoint and resolved ts are at
    /// least the rest ts of every heartbeat of its manager (`Message::Heartbeat::rest`), and it
    /// is not listed in the heartbeats between complete ones: an idle table costs a heartbeat
    /// nothing (see `DispatcherManager::heartbeat_reports`, `Maintainer::on_rest`).
    #[serde(default)]
    pub rests: bool,
}

/// How far a span's snapshot copy is durable: every key of the span at or before `cursor` (in
/// the upstream's key order; `None`: none yet) was copied and acknowledged, or all of them
/// (`done`). The cursor is the shell's, opaque to the control plane.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct CopyProgress {
    pub cursor: Option<Vec<u8>>,
    pub done: bool,
}

impl CopyProgress {
    /// The copy of a span that has copied nothing yet.
    pub fn start() -> Self {
        CopyProgress::default()
    }
    pub fn finished() -> Self {
        CopyProgress {
            cursor: None,
            done: true,
        }
    }
}

/// A dispatcher's snapshot copy as its manager reports it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CopyReport {
    pub durable: CopyProgress,
    /// Rows and chunks this dispatcher copied (acknowledged or not).
    pub rows: u64,
    pub chunks: u64,
    /// Why the last chunk read failed, while it is being tried again.
    pub error: Option<String>,
}

/// The error a failed dispatcher keeps until it is closed: its manager puts it in every heartbeat
/// (besides the one-shot [`Message::DispatcherError`]), so a lost message or a maintainer failover
/// cannot hide it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DispatcherErrorReport {
    pub id: DispatcherId,
    /// At most [`crate::config::MAX_ERROR_MESSAGE_LEN`] bytes ([`truncate_error`]).
    pub message: String,
}

/// Cut an error text to at most [`crate::config::MAX_ERROR_MESSAGE_LEN`] bytes (at a character
/// boundary, marked with `…`).
pub fn truncate_error(mut message: String) -> String {
    const MARK: &str = "…";
    let max = crate::config::MAX_ERROR_MESSAGE_LEN;
    if message.len() <= max {
        return message;
    }
    let mut cut = max - MARK.len();
    while !message.is_char_boundary(cut) {
        cut -= 1;
    }
    message.truncate(cut);
    message.push_str(MARK);
    message
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum BarrierCommand {
    /// Write the DDL at `ddl_ts` (the writer).
    Write,
    /// Skip the DDL at `ddl_ts` and go on.
    Pass,
    /// The writer's DONE was applied: go on.
    Proceed,
}

/// Where a dispatcher's snapshot copy starts.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CopyStart {
    pub from: CopyProgress,
    /// The table has no key: it is copied in one consistent read, and its stream's rows before
    /// that read are not written (they are in it).
    pub keyless: bool,
    /// Rows per chunk.
    pub chunk_rows: usize,
}

/// What a rejected create or merge says.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum RejectReason {
    /// Another dispatcher of the changefeed on this node overlaps the span.
    Overlap { with: DispatcherId },
    /// A merge source is missing, not working, or not adjacent.
    MergeSources,
    /// The dispatcher manager is closing.
    Closing,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Message {
    // ---- coordinator -> node (fenced by the coordinator's leadership revision) ----
    /// Place the maintainer of `epoch` on the node incarnation `incarnation` (a restarted node
    /// refuses a placement meant for its earlier life).
    AddMaintainer {
        cf: ChangefeedId,
        epoch: Epoch,
        rev: u64,
        incarnation: u64,
        checkpoint: Ts,
        config: ChangefeedConfig,
    },
    /// Stop the maintainer of that epoch. `cascade` also closes every dispatcher of the
    /// changefeed (pause, remove, error restart); otherwise they stay for the next maintainer.
    RemoveMaintainer {
        cf: ChangefeedId,
        epoch: Epoch,
        rev: u64,
        cascade: bool,
    },
    /// A new coordinator asks every node which maintainers it runs.
    CoordinatorBootstrap {
        rev: u64,
    },
    /// A table-level request forwarded to the maintainer.
    TableRequest {
        cf: ChangefeedId,
        req: TableRequest,
    },
    /// Cluster-wide node settings, broadcast by the coordinator (kept in the meta store).
    NodeSettings {
        rev: u64,
        cordoned: Vec<NodeId>,
        draining: Vec<NodeId>,
    },

    // ---- node -> coordinator ----
    CoordinatorBootstrapResponse {
        rev: u64,
        incarnation: u64,
        maintainers: Vec<MaintainerStatus>,
    },
    MaintainerStatusReport {
        status: MaintainerStatus,
    },

    // ---- maintainer -> dispatcher manager (fenced by epoch) ----
    Bootstrap {
        cf: ChangefeedId,
        epoch: Epoch,
        trigger: Option<(DispatcherId, Ts)>,
        config: ChangefeedConfig,
        /// Dispatchers meant for an earlier incarnation of the receiving node: a create or merge
        /// for them still in the network must never start here.
        forget: Vec<DispatcherId>,
    },
    Create {
        cf: ChangefeedId,
        epoch: Epoch,
        id: DispatcherId,
        span: Span,
        start_ts: Ts,
        /// `start_ts` is already at or above the table's replay floor (the maintainer read the
        /// downstream's record at its bootstrap and no dispatcher served the span since); when
        /// false, the dispatcher reads the floor before it subscribes (see `replay::table_floor`).
        floor_known: bool,
        /// Copy the span's rows from this progress on (a snapshot), besides streaming.
        #[serde(default)]
        copy: Option<CopyStart>,
    },
    /// (Re)start the snapshot copy of a working dispatcher's span from `copy` (a dispatcher
    /// that copies already keeps its own progress unless `restart`).
    Copy {
        cf: ChangefeedId,
        epoch: Epoch,
        id: DispatcherId,
        copy: CopyStart,
        restart: bool,
    },
    Remove {
        cf: ChangefeedId,
        epoch: Epoch,
        id: DispatcherId,
        purpose: ClosePurpose,
    },
    Merge {
        cf: ChangefeedId,
        epoch: Epoch,
        sources: Vec<DispatcherId>,
        target: DispatcherId,
        span: Span,
    },
    Barrier {
        cf: ChangefeedId,
        epoch: Epoch,
        id: DispatcherId,
        ddl_ts: Ts,
        command: BarrierCommand,
    },
    /// Close every dispatcher of the changefeed on this node (cascade stop).
    CloseChangefeed {
        cf: ChangefeedId,
        epoch: Epoch,
    },

    // ---- dispatcher manager -> maintainer (carry the manager's admitted epoch) ----
    BootstrapResponse {
        cf: ChangefeedId,
        epoch: Epoch,
        /// The responding node's incarnation (the maintainer's membership view may lag).
        incarnation: u64,
        dispatchers: Vec<DispatcherReport>,
    },
    /// Statuses that changed plus, periodically, all of them. `seq` grows with every heartbeat
    /// of this manager incarnation; a maintainer ignores regressions.
    Heartbeat {
        cf: ChangefeedId,
        epoch: Epoch,
        incarnation: u64,
        seq: u64,
        complete: bool,
        dispatchers: Vec<DispatcherReport>,
        /// The errors of this manager's failed dispatchers (at most
        /// [`crate::config::MAX_ERRORS_PER_HEARTBEAT`]), repeated in every heartbeat until the
        /// changefeed closes them.
        #[serde(default)]
        errors: Vec<DispatcherErrorReport>,
        /// Conditions that stop progress without failing anything, current at this heartbeat
        /// (capture stopped on this node, a sink retrying, a table held at a capture error); at
        /// most [`crate::config::MAX_ERRORS_PER_HEARTBEAT`]. Empty once they are gone.
        #[serde(default)]
        warnings: Vec<String>,
        /// The rest ts: every resting dispatcher of this manager (last reported with `rests`)
        /// has its checkpoint and resolved ts at or above it. `None`: none rests. Trusted only
        /// when the maintainer saw every heartbeat of this manager since the last complete one
        /// (consecutive `seq`), so a lost report that ended a rest never lets it count.
        #[serde(default)]
        rest: Option<Ts>,
    },
    Rejected {
        cf: ChangefeedId,
        epoch: Epoch,
        id: DispatcherId,
        reason: RejectReason,
    },
    BlockStatus {
        cf: ChangefeedId,
        epoch: Epoch,
        id: DispatcherId,
        span: Span,
        report: BlockReport,
    },
    CloseChangefeedResponse {
        cf: ChangefeedId,
        epoch: Epoch,
    },
    /// A fatal dispatcher error the dispatcher manager cannot handle itself, sent once when it
    /// happens; the same error then rides in every heartbeat (`Heartbeat::errors`).
    DispatcherError {
        cf: ChangefeedId,
        epoch: Epoch,
        id: DispatcherId,
        message: String,
    },
}

impl Message {
    /// A short kind name (used by traces, metrics and fault injection).
    pub fn kind(&self) -> &'static str {
        match self {
            Message::AddMaintainer { .. } => "add_maintainer",
            Message::RemoveMaintainer { .. } => "remove_maintainer",
            Message::CoordinatorBootstrap { .. } => "coordinator_bootstrap",
            Message::TableRequest { .. } => "table_request",
            Message::NodeSettings { .. } => "node_settings",
            Message::CoordinatorBootstrapResponse { .. } => "coordinator_bootstrap_response",
            Message::MaintainerStatusReport { .. } => "maintainer_status",
            Message::Bootstrap { .. } => "bootstrap",
            Message::Create { .. } => "create",
            Message::Copy { .. } => "copy",
            Message::Remove { .. } => "remove",
            Message::Merge { .. } => "merge",
            Message::Barrier { .. } => "barrier_action",
            Message::CloseChangefeed { .. } => "close_changefeed",
            Message::BootstrapResponse { .. } => "bootstrap_response",
            Message::Heartbeat { .. } => "heartbeat",
            Message::Rejected { .. } => "rejected",
            Message::BlockStatus { .. } => "block_status",
            Message::CloseChangefeedResponse { .. } => "close_changefeed_response",
            Message::DispatcherError { .. } => "dispatcher_error",
        }
    }

    /// The maintainer epoch the message carries, if it is a scheduling message.
    pub fn epoch(&self) -> Option<Epoch> {
        match self {
            Message::AddMaintainer { epoch, .. }
            | Message::RemoveMaintainer { epoch, .. }
            | Message::Bootstrap { epoch, .. }
            | Message::Create { epoch, .. }
            | Message::Copy { epoch, .. }
            | Message::Remove { epoch, .. }
            | Message::Merge { epoch, .. }
            | Message::Barrier { epoch, .. }
            | Message::CloseChangefeed { epoch, .. }
            | Message::BootstrapResponse { epoch, .. }
            | Message::Heartbeat { epoch, .. }
            | Message::Rejected { epoch, .. }
            | Message::BlockStatus { epoch, .. }
            | Message::CloseChangefeedResponse { epoch, .. }
            | Message::DispatcherError { epoch, .. } => Some(*epoch),
            Message::MaintainerStatusReport { status } => Some(status.epoch),
            _ => None,
        }
    }
}

/// A user's table-level request, executed by the maintainer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum TableRequest {
    Move {
        table: sluice_types::TableId,
        to: NodeId,
    },
    Split {
        table: sluice_types::TableId,
        spans: usize,
    },
    Merge {
        table: sluice_types::TableId,
    },
    /// Copy the table's rows again while streaming goes on (`changefeed snapshot`).
    Snapshot {
        table: sluice_types::TableId,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum MaintainerState {
    Bootstrapping,
    Working,
    /// Closing the changefeed's dispatchers (cascade stop).
    Closing,
    Stopped,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MaintainerStatus {
    pub cf: ChangefeedId,
    pub epoch: Epoch,
    pub state: MaintainerState,
    pub checkpoint: Ts,
    pub resolved: Ts,
    pub error: Option<String>,
    /// The first current warning any node reported (see `Message::Heartbeat::warnings`): the
    /// changefeed reads `warning` while it is set.
    #[serde(default)]
    pub warning: Option<String>,
    /// The snapshot copy, while the changefeed has one (absent: none, or it finished earlier).
    #[serde(default)]
    pub snapshot: Option<SnapshotStatus>,
}

/// A changefeed's snapshot copy as its maintainer sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotStatus {
    /// Tables with rows still to copy (or not yet acknowledged).
    pub tables_pending: u64,
    /// Rows copied by the dispatchers running now (a replaced dispatcher's rows are not counted).
    pub rows: u64,
    /// The first error a chunk read is being retried for.
    pub error: Option<String>,
    /// Every span's copy is durable.
    pub finished: bool,
    /// About how many rows are left: the upstream's statistics (`TABLE_ROWS`) of the tables
    /// pending less what their dispatchers copied; `None` until every pending table has them.
    #[serde(default)]
    pub rows_left: Option<u64>,
}
