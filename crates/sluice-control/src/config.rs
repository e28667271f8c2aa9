//! Changefeed and control-plane settings that the state machines read. Every timer period and
//! every bound is a named constant here.

use serde::{Deserialize, Serialize};
use sluice_types::{Millis, NodeId, Ts};

/// How often a component resends a request or report that has not been answered.
pub const RESEND_MS: Millis = 500;
/// How often a maintainer asks again for the sink's record of applied DDLs while it has no
/// answer (the bootstrap waits for it).
pub const APPLIED_RETRY_MS: Millis = 2_000;
/// How often a dispatcher manager reports its dispatchers to the maintainer.
pub const HEARTBEAT_MS: Millis = 200;
/// A heartbeat lists every dispatcher of its manager at least this often (and the first after
/// an owner change); the ones in between list only the dispatchers whose report changed since
/// it was last sent, so idle tables cost the maintainer nothing between complete heartbeats.
pub const HEARTBEAT_COMPLETE_MS: Millis = 2_000;
/// A node's complete heartbeats list at most this many dispatchers a second on average: a node
/// of more than 10,000 dispatchers (this rate times [`HEARTBEAT_COMPLETE_MS`]) lists every one
/// less often (100,000: every 20 s), so what unchanged dispatchers cost the node and the
/// maintainer stays bounded per node however many there are. Changed reports are not delayed.
pub const COMPLETE_REPORTS_PER_SEC: u64 = 5_000;

/// How long a node of `dispatchers` dispatchers waits between complete heartbeats:
/// [`HEARTBEAT_COMPLETE_MS`], or longer where [`COMPLETE_REPORTS_PER_SEC`] says so.
pub fn complete_heartbeat_ms(dispatchers: usize) -> Millis {
    let spread = (dispatchers as u64).saturating_mul(1000) / COMPLETE_REPORTS_PER_SEC;
    HEARTBEAT_COMPLETE_MS.max(spread)
}
/// How often a maintainer reports to the coordinator.
pub const MAINTAINER_STATUS_MS: Millis = 200;
/// A placed maintainer that has not reported for this long (while its node stays alive) is
/// considered lost and placed again with a new epoch.
pub const MAINTAINER_LOST_MS: Millis = 10_000;
/// A gap this long between two coordinator ticks is the coordinator's own stall (a blocking
/// call in its node's loop, a paused process), not its maintainers' silence: the silence
/// counted toward [`MAINTAINER_LOST_MS`] is the time the coordinator ran.
pub const COORDINATOR_STALL_MS: Millis = 2_500;
/// A dispatcher whose sink keeps failing with retryable errors this many times in a row without
/// any progress reports it to the maintainer (the changefeed then shows the error and restarts
/// after a backoff) instead of retrying silently forever.
pub const MAX_SINK_RETRIES_WITHOUT_PROGRESS: u32 = 10;
/// A dispatcher whose sink holds written rows unacknowledged this long says so in every
/// heartbeat (the changefeed's state reads `warning`) until the sink acknowledges again.
pub const SINK_ACK_STALL_MS: Millis = 30_000;
/// A failed dispatcher's error goes in every heartbeat of its manager until the changefeed is
/// closed; at most this many errors (one per failed dispatcher, lowest ids first) per heartbeat.
pub const MAX_ERRORS_PER_HEARTBEAT: usize = 8;
/// Error texts carried in control messages are cut to at most this many bytes.
pub const MAX_ERROR_MESSAGE_LEN: usize = 1024;
/// How often the balance, split and merge schedulers run.
pub const BALANCE_INTERVAL_MS: Millis = 2_000;
/// At most this many move operators (drain) are started per scheduler round; the adds of
/// absent spans per round are the changefeed's `add-table-batch-size`
/// ([`SchedulerConfig::add_table_batch_size`]).
pub const MAX_OPERATORS_PER_ROUND: usize = 64;
/// Default of [`SchedulerConfig::add_table_batch_size`].
pub const DEFAULT_ADD_TABLE_BATCH_SIZE: usize = 1_000;
/// At most this many unconsumed stream items a dispatcher buffers, plus the rest of the
/// transaction it is in (a transaction is never cut).
pub const MAX_BUFFERED_ITEMS: usize = 4096;
/// At most this many rows go into one sink write.
pub const MAX_ROWS_PER_WRITE: usize = 512;
/// At most this many user requests queue in a maintainer.
pub const MAX_PENDING_REQUESTS: usize = 1024;
/// Backoff after a changefeed error, doubled up to `MAX_ERROR_BACKOFF_MS`.
pub const MIN_ERROR_BACKOFF_MS: Millis = 1_000;
pub const MAX_ERROR_BACKOFF_MS: Millis = 60_000;
/// After this many consecutive errors without progress the changefeed is failed.
pub const MAX_ERROR_RETRIES: u32 = 20;

/// The `[scheduler]` settings of a changefeed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", default, deny_unknown_fields)]
pub struct SchedulerConfig {
    pub enable_table_across_nodes: bool,
    pub region_threshold: u64,
    pub region_count_per_span: u64,
    pub balance: bool,
    /// A span written faster than this many rows per second is split (0: off).
    pub write_key_threshold: u64,
    /// At most this many absent spans get an add operator per maintainer tick (TiCDC's
    /// `add-table-batch-size`): it bounds the burst of dispatcher creations a new changefeed
    /// (or a failover) sends to the nodes, and sets how fast many tables are scheduled (the
    /// maintainer ticks every 100 ms). 0 is taken as 1.
    pub add_table_batch_size: usize,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        SchedulerConfig {
            enable_table_across_nodes: false,
            region_threshold: 10_000,
            region_count_per_span: 100,
            balance: true,
            write_key_threshold: 0,
            add_table_batch_size: DEFAULT_ADD_TABLE_BATCH_SIZE,
        }
    }
}

/// What the coordinator keeps per changefeed and hands to its maintainer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangefeedConfig {
    pub sink_uri: String,
    pub start_ts: Ts,
    pub scheduler: SchedulerConfig,
    /// Where to place the first maintainer, if that node is alive.
    pub preferred_node: Option<NodeId>,
    /// Which tables the changefeed replicates.
    #[serde(default)]
    pub filter: crate::filter::FilterConfig,
    /// `[[sink.dispatchers]]`: topic and partition rules of a Kafka sink (empty: the URI's
    /// topic, the `table` dispatcher).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sink_dispatchers: Vec<sluice_types::sink_rules::DispatchRule>,
    /// Whether the tables' existing rows are copied before (while) the stream is replicated.
    #[serde(default)]
    pub snapshot: SnapshotConfig,
}

/// How a changefeed copies the rows its tables hold at its start point (`snapshot` in the
/// changefeed TOML, `--snapshot` on the CLI).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SnapshotMode {
    /// Replicate only what changes after the start point (TiCDC's behaviour).
    #[default]
    Never,
    /// Copy every table the changefeed covers, then (and meanwhile) stream.
    Initial,
    /// Copy every table, then stop: the changefeed finishes once the copy is durable.
    InitialOnly,
}

impl SnapshotMode {
    pub fn parse(s: &str) -> Result<SnapshotMode, String> {
        match s {
            "never" => Ok(SnapshotMode::Never),
            "initial" => Ok(SnapshotMode::Initial),
            "initial-only" => Ok(SnapshotMode::InitialOnly),
            other => Err(format!(
                "unknown snapshot mode {other:?}: use never (stream only, the default), initial \
                 (copy the tables, then stream) or initial-only (copy the tables, then finish)"
            )),
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            SnapshotMode::Never => "never",
            SnapshotMode::Initial => "initial",
            SnapshotMode::InitialOnly => "initial-only",
        }
    }
}

/// Default rows per snapshot chunk (one consistent read each).
pub const DEFAULT_SNAPSHOT_CHUNK_ROWS: usize = 8192;
/// At most this many rows per snapshot chunk (a chunk is one transaction downstream).
pub const MAX_SNAPSHOT_CHUNK_ROWS: usize = 65_536;
/// At most this many dispatchers of one changefeed on a node read or hold snapshot chunks at a
/// time, and at most this many chunk reads are under way (each dispatcher holds at most
/// `feed::MAX_CHUNKS_AHEAD` chunks read or being read): the memory a snapshot takes is bounded
/// whatever the number of tables, and one table alone may use every read.
pub const MAX_CONCURRENT_CHUNK_READS: usize = 4;
/// A snapshot chunk that waits this long for its span's stream to reach the position it was
/// read at (a stream lagging behind the upstream's writes) is a warning of its dispatcher.
pub const COPY_STREAM_WAIT_MS: Millis = 30_000;
/// A failed chunk read is tried again after this long.
pub const CHUNK_RETRY_MS: Millis = 2_000;

/// The `snapshot` settings of a changefeed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", default)]
pub struct SnapshotConfig {
    pub mode: SnapshotMode,
    pub chunk_rows: usize,
}

impl Default for SnapshotConfig {
    fn default() -> Self {
        SnapshotConfig {
            mode: SnapshotMode::Never,
            chunk_rows: DEFAULT_SNAPSHOT_CHUNK_ROWS,
        }
    }
}
