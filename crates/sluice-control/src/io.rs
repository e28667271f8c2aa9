//! The inputs a node's state machines take and the effects they return. The shell (server or
//! simulator) turns effects into IO and IO results back into inputs; nothing else crosses.

use crate::config::ChangefeedConfig;
use crate::hold::HoldPoint;
use crate::meta::{MetaOp, MetaResult};
use crate::msg::{Message, TableRequest};
use sluice_types::{ChangefeedId, DdlEvent, DispatcherId, Epoch, Key, NodeId, Span, TableId, Ts};
use std::collections::BTreeMap;

/// One item of a dispatcher's event stream. Rows are opaque handles: the shell keeps the data.
#[derive(Clone, Debug, PartialEq)]
pub enum StreamItem {
    Row {
        commit_ts: Ts,
        key: Key,
        handle: u64,
        /// Insert, update or delete (for event-type filters).
        kind: sluice_types::RowKind,
    },
    /// Boxed: a stream is mostly rows, and every item is as large as its largest variant.
    Ddl { ddl: Box<DdlEvent>, handle: u64 },
}

impl StreamItem {
    pub fn commit_ts(&self) -> Ts {
        match self {
            StreamItem::Row { commit_ts, .. } => *commit_ts,
            StreamItem::Ddl { ddl, .. } => ddl.commit_ts,
        }
    }
}

/// A table as the maintainer needs it to build spans.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableInfo {
    pub id: TableId,
    /// `db.table`
    pub name: String,
    /// Interior region boundaries (sorted); empty means one region.
    pub regions: Vec<Key>,
    /// False for tables without a primary or not-null unique key: one unsplittable span.
    pub splittable: bool,
}

/// The schema history a maintainer bootstraps from: the tables at its start point plus every
/// DDL after it.
#[derive(Clone, Debug, PartialEq)]
pub struct SchemaSnapshot {
    pub at_ts: Ts,
    pub tables: Vec<TableInfo>,
    pub ddls_after: Vec<DdlEvent>,
}

/// A DDL the downstream recorded (MySQL: `sluice_sink.ddl_ts`; storage: a schema file of that
/// version). The record is written only after every participant of the barrier flushed what came
/// before the DDL, so even an unfinished one proves those rows durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct AppliedDdl {
    pub commit_ts: Ts,
    /// The DDL itself took effect (else it was started and may have to run again).
    pub finished: bool,
}

/// Requests from users (API, CLI, scenario steps).
#[derive(Clone, Debug, PartialEq)]
pub enum UserRequest {
    CreateChangefeed {
        cf: ChangefeedId,
        config: ChangefeedConfig,
    },
    PauseChangefeed {
        cf: ChangefeedId,
    },
    ResumeChangefeed {
        cf: ChangefeedId,
    },
    RemoveChangefeed {
        cf: ChangefeedId,
    },
    /// Replace a paused changefeed's configuration (sink, scheduler settings).
    UpdateChangefeed {
        cf: ChangefeedId,
        config: ChangefeedConfig,
    },
    MoveMaintainer {
        cf: ChangefeedId,
        to: NodeId,
    },
    Cordon {
        node: NodeId,
        on: bool,
    },
    Drain {
        node: NodeId,
    },
    Table {
        cf: ChangefeedId,
        req: TableRequest,
    },
}

#[derive(Clone, Debug, PartialEq)]
pub enum Input {
    /// Time passes; periodic work (resends, heartbeats, schedulers) runs.
    Tick,
    Message {
        from: NodeId,
        msg: Message,
    },
    /// The nodes whose lease is alive, with their incarnation (a restarted node is a new
    /// incarnation), from the meta store's membership watch.
    NodesChanged {
        alive: BTreeMap<NodeId, u64>,
    },
    /// Who holds the coordinator election key, and the key's revision.
    Leader {
        node: Option<NodeId>,
        rev: u64,
    },
    MetaResult {
        req: u64,
        result: MetaResult,
    },
    /// The answer to `LoadSchema`, with the changefeed's epoch as the meta store has it now: a
    /// maintainer whose epoch is not that one is stale and stops before it bootstraps anything.
    Schema {
        cf: ChangefeedId,
        epoch: Epoch,
        snapshot: SchemaSnapshot,
        persisted_epoch: Epoch,
    },
    /// The answer to `LoadApplied`: the DDLs after `after` the changefeed's downstream recorded,
    /// or why they could not be read (the maintainer asks again and shows a warning meanwhile).
    Applied {
        cf: ChangefeedId,
        epoch: Epoch,
        result: Result<Vec<AppliedDdl>, String>,
    },
    /// The answer to `LoadFloor`: where the dispatcher `id` may start at the earliest (the
    /// latest DDL of its table the downstream recorded; 0: none), or why it could not be read.
    Floor {
        cf: ChangefeedId,
        id: DispatcherId,
        result: Result<Ts, String>,
    },
    Regions {
        table: TableId,
        regions: Vec<Key>,
        /// The upstream's estimate of the table's rows (its statistics), for the snapshot's
        /// estimate of the time left.
        rows: u64,
    },
    /// Rows and DDLs of a dispatcher's stream: everything at or below `resolved_ts` that
    /// follows what it had. Rows above `resolved_ts` (at exactly `resolved_ts + 1`) are a part
    /// of a transaction too large for one batch: its next rows come in the next batch.
    Events {
        cf: ChangefeedId,
        id: DispatcherId,
        items: Vec<StreamItem>,
        resolved_ts: Ts,
    },
    /// Dispatchers of `cf` whose streams have nothing new up to `resolved_ts` (no row, no
    /// DDL): an `Events` without items for each, in one input.
    Resolved {
        cf: ChangefeedId,
        ids: Vec<DispatcherId>,
        resolved_ts: Ts,
    },
    /// Every write of this dispatcher at or below `ts` is durable.
    SinkFlushed {
        cf: ChangefeedId,
        id: DispatcherId,
        ts: Ts,
    },
    /// No write of this dispatcher can land any more.
    SinkClosed {
        cf: ChangefeedId,
        id: DispatcherId,
    },
    SinkError {
        cf: ChangefeedId,
        id: DispatcherId,
        retryable: bool,
        /// The sink refuses this table as it is (e.g. no key): retrying cannot help and the
        /// changefeed's other tables are fine. The dispatcher stops with a warning; the
        /// changefeed is not restarted for it.
        table_only: bool,
        message: String,
    },
    Hold {
        point: HoldPoint,
        on: bool,
    },
    Request(UserRequest),
    /// The feed holds the snapshot chunk the dispatcher asked for (`Effect::ReadChunk`): `rows`
    /// rows read consistently at `ts - 1` (a binlog position), which reach the dispatcher in its
    /// stream at `ts`, after everything at or below the position and before everything after it.
    /// `cursor` is where the next chunk starts; `more` false: the span has no rows after it.
    ChunkQueued {
        cf: ChangefeedId,
        id: DispatcherId,
        /// The read it answers (`ChunkAsk::read`).
        read: u64,
        ts: Ts,
        cursor: Option<Vec<u8>>,
        more: bool,
        rows: usize,
    },
    /// A chunk read failed (the dispatcher tries again after a pause and says so meanwhile).
    ChunkFailed {
        cf: ChangefeedId,
        id: DispatcherId,
        read: u64,
        message: String,
    },
    /// The chunk read the dispatcher asked for will not be answered (its subscription ended
    /// while it was under way): it may ask again.
    ChunkDropped {
        cf: ChangefeedId,
        id: DispatcherId,
        read: u64,
    },
    /// The shell's answer to `Effect::ProbeChunks`: the keys that end the next chunks of the
    /// span (in the shell's cursor form), or why it could not tell.
    ChunkBounds {
        cf: ChangefeedId,
        id: DispatcherId,
        probe: u64,
        result: Result<Vec<Vec<u8>>, String>,
    },
    /// The stream was taken back below a chunk the feed had already handed out (a
    /// resubscription), or a window read could not go into the stream (`why`): the dispatcher
    /// copies again from its durable progress (after a pause, reporting `why`, when it is set).
    ChunkLost {
        cf: ChangefeedId,
        id: DispatcherId,
        why: Option<String>,
    },
    /// Capture on this node stopped with this error (or runs again: `None`). While it is set,
    /// every changefeed with work here reads `warning` with this message.
    CaptureStatus {
        error: Option<String>,
    },
}

#[derive(Clone, Debug, PartialEq)]
pub enum SinkCommand {
    /// Rows of whole transactions, in commit order. A transaction too large for one batch of
    /// the feed comes in parts: with `open`, the last transaction of `rows` continues in the
    /// next write of the dispatcher (nothing of a later transaction comes between), and the sink
    /// acknowledges nothing of it until the write that ends it.
    WriteRows {
        cf: ChangefeedId,
        id: DispatcherId,
        span: Span,
        rows: Vec<(Ts, Key, u64)>,
        open: bool,
    },
    WriteDdl {
        cf: ChangefeedId,
        id: DispatcherId,
        ddl: DdlEvent,
        handle: u64,
    },
    /// Make everything written so far durable and acknowledge it.
    Flush { cf: ChangefeedId, id: DispatcherId },
    /// Stop accepting writes of this dispatcher and answer `SinkClosed` once none can land.
    Close { cf: ChangefeedId, id: DispatcherId },
}

/// Facts the state machines announce for observers (simulator checkers, logs, metrics).
#[derive(Clone, Debug, PartialEq)]
pub enum TraceEvent {
    /// A dispatcher manager applied a scheduling message of this epoch.
    Applied {
        cf: ChangefeedId,
        kind: &'static str,
        epoch: Epoch,
    },
    /// A message was dropped as stale (old epoch, old revision, wrong sender).
    Stale {
        kind: &'static str,
        reason: &'static str,
    },
    DispatcherStarted {
        cf: ChangefeedId,
        id: DispatcherId,
        span: Span,
        start_ts: Ts,
    },
    DispatcherClosed {
        cf: ChangefeedId,
        id: DispatcherId,
    },
    MaintainerCheckpoint {
        cf: ChangefeedId,
        epoch: Epoch,
        checkpoint: Ts,
    },
    /// A maintainer confirmed its epoch is the persisted one and starts bootstrapping: it acts.
    MaintainerStarted {
        cf: ChangefeedId,
        epoch: Epoch,
    },
    MaintainerBootstrapped {
        cf: ChangefeedId,
        epoch: Epoch,
    },
    RequestDone {
        cf: ChangefeedId,
        req: TableRequest,
        outcome: String,
    },
    ChangefeedRestarted {
        cf: ChangefeedId,
        reason: String,
    },
    Log(String),
}

/// A snapshot chunk read of a subscribed dispatcher's span: at most `limit` rows of the span
/// after `after` (a cursor or bound; `None`: from the start) and up to `upto` (a bound from
/// [`ChunkProbe`], included; `None`: to the span's end), in the upstream's key order, in one
/// consistent read at a known binlog position (all of a keyless table). A dispatcher may have
/// several reads of disjoint ranges under way; `read` tells them apart.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChunkAsk {
    pub cf: ChangefeedId,
    pub id: DispatcherId,
    pub read: u64,
    pub span: Span,
    pub after: Option<Vec<u8>>,
    pub upto: Option<Vec<u8>>,
    pub limit: usize,
    pub keyless: bool,
}

/// Where the next `count` chunks of `rows` rows of the span after `after` end: the key of every
/// `rows`-th row after it, in the upstream's key order, as cursors (fewer when the span has
/// fewer rows left; not a consistent read: any key is a valid bound).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChunkProbe {
    pub cf: ChangefeedId,
    pub id: DispatcherId,
    pub probe: u64,
    pub span: Span,
    pub after: Option<Vec<u8>>,
    pub rows: usize,
    pub count: usize,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Effect {
    Send {
        to: NodeId,
        msg: Message,
    },
    Meta {
        req: u64,
        op: MetaOp,
    },
    LoadSchema {
        cf: ChangefeedId,
        epoch: Epoch,
        at_ts: Ts,
    },
    /// Read which DDLs with commit ts above `after` the sink at `sink_uri` has recorded as
    /// applied for this changefeed; answered by `Input::Applied`.
    LoadApplied {
        cf: ChangefeedId,
        epoch: Epoch,
        sink_uri: String,
        after: Ts,
    },
    /// Compute the replay floor of `table` for a dispatcher about to start at `after`: the
    /// sink's record of DDLs above `after` ([`AppliedDdl`]) bounded by the schema history as
    /// [`crate::maintainer::replay::table_floor`] does; answered by `Input::Floor`.
    LoadFloor {
        cf: ChangefeedId,
        id: DispatcherId,
        table: TableId,
        sink_uri: String,
        after: Ts,
    },
    Subscribe {
        cf: ChangefeedId,
        id: DispatcherId,
        span: Span,
        is_trigger: bool,
        start_ts: Ts,
    },
    Unsubscribe {
        cf: ChangefeedId,
        id: DispatcherId,
    },
    /// Read a snapshot chunk ([`ChunkAsk`]). The feed holds the dispatcher's stream below
    /// every position its reads under way may be at until the shell hands it the rows
    /// ([`crate::feed::Feed::on_chunk`]) or the failure (`Input::ChunkFailed`).
    ReadChunk(ChunkAsk),
    /// Find where the next chunks of a span end ([`ChunkProbe`]), answered by
    /// `Input::ChunkBounds`. The shell's, past the feed.
    ProbeChunks(ChunkProbe),
    Sink(SinkCommand),
    /// The coordinator persisted this changefeed checkpoint (its write succeeded): the sink's own
    /// checkpoint record and the event store's garbage collection may follow it. The one way the
    /// shell learns it; nobody decodes the coordinator's meta-store records.
    CheckpointPersisted {
        cf: ChangefeedId,
        ts: Ts,
    },
    Trace(TraceEvent),
}
