//! Sinks: where dispatchers write what they receive, and what tells them it is durable.
//!
//! This crate owns the sink contract ([`Sink`]), its one implementation of the bookkeeping every
//! sink shares ([`runner`]: per-dispatcher order checks, acknowledgements, barrier flushes,
//! closing), the sinks themselves ([`storage`]: local files and S3 in TiCDC's layout; [`mysql`];
//! [`blackhole`]), their codecs ([`codec`]), sink URIs ([`uri`]) and two tools: [`check`]
//! (compare upstream and downstream tables) and [`consume`] (apply a storage layout to MySQL).
//!
//! Invariants of the contract (checked by `tests/contract.rs` against every sink):
//! - an acknowledgement (`flush`'s return value, the [`AckReceiver`]) is the commit ts `T` such
//!   that every row this dispatcher wrote with commit ts `<= T` is durable; it never decreases and
//!   never exceeds the greatest commit ts written or resolved by the dispatcher;
//! - a transaction written in parts ([`Sink::write_part`]) is acknowledged only once its last
//!   part was written and flushed: an ack never lands inside a transaction;
//! - `write_ddl` is a barrier: it returns only after every earlier row of the dispatcher is
//!   durable and the DDL itself took effect; its ack is the DDL's commit ts;
//! - `close` returns only when no write of that dispatcher can still land; it never fails the
//!   changefeed (a failure while closing is reported in [`CloseReport`], and the successor
//!   replays from the last ack);
//! - errors are [`SinkError`]s, classified retryable or fatal ([`SinkError::class`]);
//! - a failed flush fails the dispatcher even when the sink ran it on its own (a periodic flush
//!   whose result no caller awaits): [`Sink::failure`] then returns the error and the
//!   dispatcher's [`AckReceiver`] is woken with its ack unchanged, so a caller that only waits
//!   for acks learns of the failure at once instead of waiting forever;
//! - with a write fence ([`fence`], cluster mode) a dispatcher writes downstream only while the
//!   fence returns the incarnation it was opened under: every downstream write is checked
//!   immediately before it is made, whoever makes it (also the periodic flush and `close`), and
//!   a refused one fails the dispatcher with [`SinkError::Fenced`] (retryable), writing nothing.
//!
//! Creating a sink from a URI: [`open_sink`], [`open_sink_with`] (with a write fence); checking
//! one before a changefeed is created or updated: [`check_sink`].
//!
//! Layout rule: each sink is a component, a folder (`storage/`, `mysql/`; the blackhole is one
//! file) whose `config.rs` parses its own URI parameters into its config, and whose config
//! prepares and builds the sink; [`uri`] only dispatches on the scheme and holds what every
//! parameter parser shares. One concern per file; a type's `impl` blocks may spread over the
//! files of its module.

pub mod blackhole;
pub mod check;
pub mod codec;
pub mod consume;
pub mod ddl_session;
pub mod error;
pub mod fence;
pub mod kafka;
pub mod mysql;
pub mod runner;
pub mod storage;
pub mod testing;
pub mod uri;

pub use error::{ErrorClass, Result, SinkError};
pub use fence::{BoundFence, WriteFence};
pub use mysql::fence::{HoldAt, WriteHolds};
pub use uri::{SinkConfig, SinkUri};

use async_trait::async_trait;
use sluice_types::{DdlEvent, DispatcherId, RowEvent, Span, TableSchema, Ts};
use std::sync::Arc;

/// Rows of one table version, in commit-ts order, made of whole transactions: a later call of
/// the same dispatcher carries only greater commit ts.
#[derive(Clone, Debug)]
pub struct RowBatch {
    pub schema: Arc<TableSchema>,
    pub rows: Vec<RowEvent>,
}

/// A DDL the downstream holds a record of (see [`Sink::applied_ddls`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct DdlRecord {
    pub commit_ts: Ts,
    /// It took effect; `false`: it was started (every earlier row of its tables is durable, the
    /// DDL itself may have to run again).
    pub finished: bool,
}

/// The latest acknowledged commit ts of one dispatcher (see the crate docs).
pub type AckReceiver = tokio::sync::watch::Receiver<Ts>;

/// What `close` reports.
#[derive(Debug)]
pub struct CloseReport {
    /// The final acknowledged commit ts: the successor of this span resumes after it.
    pub durable_ts: Ts,
    /// A failure met while flushing for the close (already accounted for in `durable_ts`).
    pub error: Option<SinkError>,
}

/// The sink contract. All methods are cancel-safe: work that touches the destination runs in a
/// task of its own that finishes even when the caller's future is dropped, and `close` waits for it.
#[async_trait]
pub trait Sink: Send + Sync {
    /// Registers a dispatcher serving `span`, resuming after `start_ts` (its checkpoint). Rows must
    /// have commit ts greater than `start_ts`. Re-opening an open dispatcher is a contract error.
    async fn open(&self, dispatcher: DispatcherId, span: Span, start_ts: Ts)
        -> Result<AckReceiver>;
    /// Writes rows (buffered; durable only once acknowledged).
    async fn write_rows(&self, dispatcher: DispatcherId, batch: RowBatch) -> Result<()>;
    /// Writes a **part**: rows whose last transaction continues in the next write of this
    /// dispatcher (a transaction too large to hold whole comes in parts, in order; the next
    /// write's first rows are of the same commit ts). Everything before that transaction is
    /// made durable first, and the ack stays below it until a `write_rows` ends it. A sink that
    /// keeps upstream transactions whole downstream holds its parts until then (MySQL's
    /// `transaction-atomicity=table`) or keeps one downstream transaction open across them
    /// (Kafka's `transactional=true`); the others write them as they come (a crash before the
    /// end replays the whole transaction: at least once).
    async fn write_part(&self, dispatcher: DispatcherId, batch: RowBatch) -> Result<()>;
    /// Declares that no row with commit ts `<= ts` will follow, so the ack may reach `ts` when
    /// everything written before is durable.
    async fn resolve(&self, dispatcher: DispatcherId, ts: Ts) -> Result<()>;
    /// Makes everything written so far durable; returns the new ack.
    async fn flush(&self, dispatcher: DispatcherId) -> Result<Ts>;
    /// Barrier flush then the DDL (`tables`: the table versions the DDL produces, empty for a
    /// database-level DDL). Returns the ack, which is `ddl.commit_ts`.
    async fn write_ddl(
        &self,
        dispatcher: DispatcherId,
        ddl: DdlEvent,
        tables: Vec<Arc<TableSchema>>,
    ) -> Result<Ts>;
    /// Records the changefeed checkpoint where the sink keeps one (storage: the root `metadata`
    /// file); never moves it backwards.
    async fn write_checkpoint(&self, ts: Ts) -> Result<()>;
    /// The DDLs with commit ts above `after` this sink has recorded downstream for its changefeed,
    /// in commit order: the MySQL sink's `ddl_ts` rows, the storage layout's schema files (a
    /// version there was written by its DDL, or by rows that came after it); nothing for a sink
    /// that keeps no state. A maintainer bootstraps only once it knows them (the replay rule:
    /// no table replays rows a DDL the downstream already applied has removed). A read: never
    /// fenced.
    async fn applied_ddls(&self, after: Ts) -> Result<Vec<DdlRecord>>;
    /// Flushes what it can, then forgets the dispatcher. Returns when no write of it can land.
    async fn close(&self, dispatcher: DispatcherId) -> CloseReport;
    /// The current ack of an open dispatcher.
    fn durable_ts(&self, dispatcher: DispatcherId) -> Option<Ts>;
    /// The error that failed an open dispatcher (as [`SinkError::Earlier`]), if a flush of it
    /// failed, including one the sink ran on its own; `None` while it is healthy or not open.
    /// Does not wait for a write in flight.
    fn failure(&self, dispatcher: DispatcherId) -> Option<SinkError>;
}

/// Builds the sink a URI names (`file://`, `s3://`, `mysql://`, `blackhole://`) for changefeed
/// `"default"`. Must be called inside a tokio runtime with the time driver (sinks run a flush
/// ticker). See [`open_sink_for`].
pub async fn open_sink(uri: &str) -> Result<Arc<dyn Sink>> {
    open_sink_for("default", uri).await
}

/// Checks a sink URI as changefeed create and update do, before anything is created: the URI
/// parses, a MySQL downstream accepts a connection (address, credentials; the progress tables
/// are created), a storage location takes a test object and gives it back
/// ([`storage::probe`]: endpoint, credentials, bucket, a writable directory).
pub async fn check_sink(uri: &str) -> Result<()> {
    match SinkUri::parse(uri)?.config {
        SinkConfig::Blackhole => Ok(()),
        SinkConfig::Storage(cfg) => storage::probe(&cfg).await,
        SinkConfig::Mysql(_) => open_sink(uri).await.map(|_| ()),
        SinkConfig::Kafka(cfg) => cfg.probe().await,
    }
}

/// Checks a changefeed's `[[sink.dispatchers]]` against its sink URI: rules need a Kafka sink,
/// each must be valid (the error names the rule), and `protocol=avro` needs a topic per table.
/// A URI that does not parse passes here: [`check_sink`] reports it.
pub fn check_dispatchers(
    uri: &str,
    rules: &[sluice_types::sink_rules::DispatchRule],
) -> Result<()> {
    let Ok(parsed) = SinkUri::parse(uri) else {
        return Ok(());
    };
    let SinkConfig::Kafka(cfg) = &parsed.config else {
        if rules.is_empty() {
            return Ok(());
        }
        return Err(SinkError::invalid_uri(
            &parsed,
            "[[sink.dispatchers]] route messages of a kafka:// sink; this sink takes none",
        ));
    };
    let router = kafka::route::Router::new(&cfg.topic, rules)
        .map_err(|e| SinkError::invalid_uri(&parsed, e))?;
    if cfg.protocol == kafka::config::KafkaProtocol::Avro {
        router
            .check_topic_per_table()
            .map_err(|e| SinkError::invalid_uri(&parsed, e))?;
    }
    Ok(())
}

/// Prepares the downstream for a changefeed created now with id `changefeed` from `start_ts`.
/// What the downstream recorded for a removed changefeed of the same id is not this one's, and
/// the replay rule would read it as this changefeed's progress (skipping rows): the MySQL sink
/// deletes the id's `ddl_ts` and checkpoint rows; a storage location that already holds table
/// versions above `start_ts` is refused (use an empty location, or a later start).
pub async fn prepare_new_changefeed(changefeed: &str, uri: &str, start_ts: Ts) -> Result<()> {
    let parsed = SinkUri::parse(uri)?;
    match parsed.config {
        SinkConfig::Blackhole | SinkConfig::Kafka(_) => Ok(()),
        SinkConfig::Mysql(cfg) => cfg.prepare(changefeed).await,
        SinkConfig::Storage(cfg) => cfg.prepare(&uri::mask_uri(uri), start_ts).await,
    }
}

/// Builds the sink of one changefeed, without a write fence. The changefeed id keys what the
/// sink records downstream (the MySQL sink's `ddl_ts` and checkpoint rows), so changefeeds
/// sharing a downstream never skip each other's DDLs.
pub async fn open_sink_for(changefeed: &str, uri: &str) -> Result<Arc<dyn Sink>> {
    open_sink_with(changefeed, uri, None, None).await
}

/// [`open_sink_for`] with an optional write fence ([`fence`]): each dispatcher opened on the sink
/// is bound to the incarnation the fence returns at `open`, and every downstream write checks it
/// first. `None`: unfenced (standalone use). `holds`: debug holds of the MySQL sink's
/// transactions ([`HoldAt`]; a node's `--enable-debug-holds`), shared by every sink the node
/// opens; other sinks have none.
pub async fn open_sink_with(
    changefeed: &str,
    uri: &str,
    fence: Option<WriteFence>,
    holds: Option<Arc<WriteHolds>>,
) -> Result<Arc<dyn Sink>> {
    open_sink_routed(changefeed, uri, &[], fence, holds, None).await
}

/// [`open_sink_with`] with the changefeed's `[[sink.dispatchers]]` (a Kafka sink's topic and
/// partition rules; other sinks take none) and the upstream's binlog base name (`mysql-bin`
/// for files `mysql-bin.000042`; a Kafka sink's Debezium messages name their binlog file by it,
/// `None`: they leave `source.file` empty; other sinks do not use it).
pub async fn open_sink_routed(
    changefeed: &str,
    uri: &str,
    rules: &[sluice_types::sink_rules::DispatchRule],
    fence: Option<WriteFence>,
    holds: Option<Arc<WriteHolds>>,
    binlog_base: Option<&str>,
) -> Result<Arc<dyn Sink>> {
    match SinkUri::parse(uri)?.config {
        SinkConfig::Blackhole => blackhole::build(fence),
        SinkConfig::Storage(cfg) => cfg.build(fence),
        SinkConfig::Mysql(cfg) => cfg.build(changefeed, fence, holds).await,
        SinkConfig::Kafka(cfg) => cfg.build(changefeed, rules, fence, binlog_base),
    }
}
