//! The binlog reader: one replication connection to the upstream that turns the row binlog
//! into whole committed transactions ([`Transaction`]), each with its commit ts (see
//! [`crate::pos`]) and decoded rows.
//!
//! Invariants:
//! - a transaction is emitted only when its last event (XID, COMMIT, or the DDL itself) has
//!   been read, so every emitted transaction is complete;
//! - the reader keeps `committed`, the position right after the last emitted transaction (or a
//!   rotation point between transactions). After any connection error it reconnects with
//!   exponential backoff and asks for the binlog from `committed`: the resumed stream has no
//!   gap, and the only events read twice belong to the transaction that was incomplete when the
//!   connection dropped (it was never emitted);
//! - MariaDB specifics are handled here: `@mariadb_slave_capability=4` so real GTID events are
//!   sent, GTID (162) bodies parsed by hand (sequence u64 LE, domain u32 LE, flags u8; a
//!   `FL_STANDALONE` GTID is followed by exactly one statement and no XID/COMMIT), GTID_LIST,
//!   BINLOG_CHECKPOINT and ANNOTATE_ROWS skipped, the 4 checksum bytes trimmed from the name in
//!   the fake ROTATE sent before the format description, compressed events
//!   (`log_bin_compress`) and compressed columns inflated ([`crate::compression`]);
//! - every event with a CRC32 checksum is verified; a mismatch drops the connection and
//!   re-reads from `committed` (a corrupt event is never decoded);
//! - error 1236 (the requested file is purged or missing) is the fatal
//!   [`CaptureError::BinlogPurged`] naming the file;
//! - memory: the rows of a transaction are buffered until its end, except that every
//!   [`ReaderConfig::chunk_bytes`] of row events they are handed out early as a
//!   [`ReaderEvent::Chunk`] (commit ts not known yet), so a multi-GiB transaction streams
//!   through bounded memory. If the connection drops after chunks of a transaction were handed
//!   out, the next event is [`ReaderEvent::Abort`]: the consumer discards those chunks (the
//!   transaction is read again from its start). A transaction carrying a statement
//!   (`CREATE TABLE ... SELECT`) is never chunked; it is bounded by
//!   [`ReaderConfig::max_txn_bytes`] instead (a bigger one is a fatal error, never an OOM).

use crate::decode::{DecodeError, TableMeta};
use crate::error::{CaptureError, Result};
use crate::pos::{commit_ts, file_index, BinlogPos};
use crate::unreplicable::{self, Unreplicable};
use futures::StreamExt;
use mysql_async::binlog::events::{Event, EventData, RotateEvent, RowsEventData, TableMapEvent};
use mysql_async::binlog::EventType;
use mysql_async::prelude::Queryable;
use mysql_async::{BinlogStream, BinlogStreamRequest};
use sluice_types::{RowKind, Ts, Value};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// MariaDB event types that mysql_common does not decode.
pub mod mariadb_event {
    pub const ANNOTATE_ROWS: u8 = 160;
    pub const BINLOG_CHECKPOINT: u8 = 161;
    pub const GTID: u8 = 162;
    pub const GTID_LIST: u8 = 163;
    pub const START_ENCRYPTION: u8 = 164;
    pub const QUERY_COMPRESSED: u8 = 165;
    /// 166..=171: compressed ROWS events.
    pub const FIRST_COMPRESSED_ROWS: u8 = 166;
    pub const LAST_COMPRESSED_ROWS: u8 = 171;
    /// MySQL 8's TRANSACTION_PAYLOAD (a zstd-compressed transaction,
    /// `binlog_transaction_compression=ON`): its rows cannot be read here.
    pub const MYSQL_TRANSACTION_PAYLOAD: u8 = 40;
}

/// GTID flag: the transaction is one statement without BEGIN/COMMIT (DDL, non-transactional).
pub const GTID_FL_STANDALONE: u8 = 1;

/// Default size of the chunks a large transaction is handed out in.
pub const DEFAULT_CHUNK_BYTES: usize = 32 << 20;

/// Default bound on the bytes of row events buffered for one unchunkable transaction.
pub const DEFAULT_MAX_TXN_BYTES: usize = 512 << 20;

/// Reader configuration.
#[derive(Clone, Debug)]
pub struct ReaderConfig {
    /// `mysql://user:pass@host:port`.
    pub url: String,
    /// The replica server id this reader registers with; must be unique per node and differ from
    /// every real replica's id.
    pub server_id: u32,
    /// Where to start: a transaction boundary (e.g. [`BinlogPos::from_ts`] of a checkpoint).
    pub start: BinlogPos,
    /// Upstream heartbeat period (MariaDB sends a HEARTBEAT when idle this long). A connection
    /// silent for 4 periods is considered dead.
    pub heartbeat: Duration,
    /// First reconnect delay; doubles up to `backoff_max`.
    pub backoff_initial: Duration,
    pub backoff_max: Duration,
    /// Give up after this many consecutive failed reconnects (`None`: never).
    pub max_reconnects: Option<u32>,
    /// See the module invariants.
    pub max_txn_bytes: usize,
    /// Hand out the rows of a transaction in chunks of about this many bytes of row events.
    pub chunk_bytes: usize,
    /// Decode rows with the fast parser ([`crate::rowimage`]); `false` forces mysql_common's
    /// generic path (used by tests to check both agree).
    pub fast_decode: bool,
    /// Set while the reader keeps failing to reconnect (from the second failure in a row: what
    /// failed and how often), cleared once it hands out an event again: so a capture that
    /// retries forever is visible to whoever shares this cell (the server's changefeed state).
    pub retrying: Arc<std::sync::Mutex<Option<String>>>,
}

impl ReaderConfig {
    pub fn new(url: impl Into<String>, server_id: u32, start: BinlogPos) -> Self {
        ReaderConfig {
            url: url.into(),
            server_id,
            start,
            heartbeat: Duration::from_millis(1000),
            backoff_initial: Duration::from_millis(100),
            backoff_max: Duration::from_secs(5),
            max_reconnects: None,
            max_txn_bytes: DEFAULT_MAX_TXN_BYTES,
            chunk_bytes: DEFAULT_CHUNK_BYTES,
            fast_decode: true,
            retrying: Default::default(),
        }
    }
}

pub use sluice_types::Gtid;

/// Parses a MariaDB GTID event body (without header and checksum).
pub fn parse_gtid_body(body: &[u8], server_id: u32) -> Option<(Gtid, u8)> {
    let seq = u64::from_le_bytes(body.get(0..8)?.try_into().ok()?);
    let domain = u32::from_le_bytes(body.get(8..12)?.try_into().ok()?);
    let flags = *body.get(12)?;
    Some((
        Gtid {
            domain,
            server: server_id,
            seq,
        },
        flags,
    ))
}

/// One decoded row change (table identity by name; ids come from the schema history).
#[derive(Clone, Debug, PartialEq)]
pub struct RowChange {
    pub table: Arc<TableMeta>,
    pub kind: RowKind,
    pub before: Option<Vec<Value>>,
    pub after: Option<Vec<Value>>,
}

/// A statement logged as a QUERY event in its own transaction (DDL and other statements).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Statement {
    /// The default database of the session.
    pub database: String,
    pub query: String,
    /// The session settings the statement ran under ([`crate::session`]).
    pub session: Box<sluice_types::DdlSession>,
}

/// One complete upstream transaction.
#[derive(Clone, Debug, PartialEq)]
pub struct Transaction {
    pub commit_ts: Ts,
    /// Upstream commit time (binlog header, 1 s resolution) in ms since the Unix epoch.
    pub commit_time_ms: u64,
    /// Where the transaction begins (re-reading from here yields it again).
    pub start: BinlogPos,
    /// Right after the transaction (resume point).
    pub end: BinlogPos,
    pub gtid: Option<Gtid>,
    pub rows: Vec<RowChange>,
    pub statement: Option<Statement>,
    /// Rows of this transaction handed out before in [`ReaderEvent::Chunk`]s (they precede
    /// `rows` in transaction order).
    pub chunked_rows: usize,
    /// Changes the binlog shows but does not carry as full rows ([`crate::unreplicable`]).
    pub unreplicable: Vec<Unreplicable>,
    /// What the DELETEs and UPDATEs of this transaction (chunked rows included) did per table,
    /// for the foreign-key cascades they may cause ([`crate::foreign_keys::cascades`]).
    pub parent_changes: crate::foreign_keys::ParentChanges,
}

/// Rows of a transaction not finished yet.
#[derive(Clone, Debug, PartialEq)]
pub struct TxnChunk {
    /// Where the transaction begins (identifies it until its commit).
    pub start: BinlogPos,
    /// The transaction's GTID (MariaDB), known from its start.
    pub gtid: Option<Gtid>,
    /// Position in the transaction of the first row of this chunk.
    pub first_seq: usize,
    pub rows: Vec<RowChange>,
}

/// What the reader yields.
#[derive(Clone, Debug, PartialEq)]
pub enum ReaderEvent {
    Transaction(Transaction),
    /// The reader is idle at a transaction boundary: every transaction with commit ts `<= ts`
    /// has been yielded.
    Resolved(Ts),
    /// Early rows of a large transaction (see the module invariants).
    Chunk(TxnChunk),
    /// The transaction starting at this position will be read again: discard its chunks.
    Abort(BinlogPos),
}

struct Pending {
    start: BinlogPos,
    gtid: Option<Gtid>,
    standalone: bool,
    rows: Vec<RowChange>,
    bytes: usize,
    /// Rows already handed out in chunks.
    chunked: usize,
    /// A schema statement inside the transaction (CREATE TABLE ... SELECT).
    statement: Option<Statement>,
    /// Changes of this transaction that cannot be replicated ([`crate::unreplicable`]).
    unreplicable: Vec<Unreplicable>,
    /// DELETEs and UPDATEs per table (see [`Transaction::parent_changes`]).
    parents: crate::foreign_keys::ParentChanges,
}

impl Pending {
    /// A transaction that begins at `start` with nothing read yet.
    fn starting(start: BinlogPos, gtid: Option<Gtid>, standalone: bool) -> Pending {
        Pending {
            start,
            gtid,
            standalone,
            rows: Vec::new(),
            bytes: 0,
            chunked: 0,
            statement: None,
            unreplicable: Vec::new(),
            parents: Default::default(),
        }
    }
}

/// Counters, for tests and metrics.
#[derive(Clone, Debug, Default)]
pub struct ReaderStats {
    pub connects: u64,
    pub events: u64,
    pub checksums_verified: u64,
    pub transactions: u64,
    /// Incomplete transactions dropped because the connection ended inside them.
    pub partial_dropped: u64,
    /// Chunks of large transactions handed out.
    pub chunks: u64,
}

/// The binlog reader. Call [`BinlogReader::next`] in a loop.
pub struct BinlogReader {
    cfg: ReaderConfig,
    stream: Option<BinlogStream>,
    /// Resume point: right after the last emitted transaction.
    committed: BinlogPos,
    /// The file being read.
    file: String,
    pending: Option<Pending>,
    tables: HashMap<u64, Arc<TableMeta>>,
    /// TABLE_MAPs rewritten without compressed column types (see [`crate::compression`]),
    /// for the generic row decoder; the stream's own copy keeps types 140/141.
    plain_maps: HashMap<u64, TableMapEvent<'static>>,
    /// TABLE_MAPs that could not be read (an unsupported column type, metadata missing): the
    /// rows of that table id stop only that table ([`crate::unreplicable`]).
    bad_maps: HashMap<u64, Unreplicable>,
    failures: u32,
    /// Start of a transaction whose chunks were handed out and must be discarded.
    abort: Option<BinlogPos>,
    pub stats: ReaderStats,
}

impl BinlogReader {
    pub fn new(cfg: ReaderConfig) -> Self {
        let committed = cfg.start.clone();
        let file = committed.file.clone();
        BinlogReader {
            cfg,
            stream: None,
            committed,
            file,
            pending: None,
            tables: HashMap::new(),
            plain_maps: HashMap::new(),
            bad_maps: HashMap::new(),
            failures: 0,
            abort: None,
            stats: ReaderStats::default(),
        }
    }

    /// The resume point (right after the last yielded transaction).
    pub fn position(&self) -> &BinlogPos {
        &self.committed
    }

    /// Drops the current connection (tests; the next call reconnects from the resume point).
    pub fn disconnect(&mut self) {
        self.drop_connection();
    }

    /// Forgets the connection and the open transaction; chunks already handed out for it are
    /// to be aborted (the next event is [`ReaderEvent::Abort`]).
    fn drop_connection(&mut self) {
        self.stream = None;
        if let Some(p) = self.pending.take() {
            self.stats.partial_dropped += 1;
            if p.chunked > 0 {
                self.abort = Some(p.start);
            }
        }
    }

    async fn connect(&mut self) -> Result<()> {
        let opts = mysql_async::Opts::from_url(&self.cfg.url)
            .map_err(|e| CaptureError::Connection(format!("bad url: {e}")))?;
        // A binlog event may be larger than the server's max_allowed_packet (a replica reads
        // with slave_max_allowed_packet, 1 GiB): the client takes packets up to that size, or
        // one big row stops capture for every table.
        let opts = mysql_async::OptsBuilder::from_opts(opts).max_allowed_packet(Some(1 << 30));
        let mut conn = mysql_async::Conn::new(opts)
            .await
            .map_err(CaptureError::from_mysql)?;
        conn.query_drop("SET @mariadb_slave_capability=4")
            .await
            .map_err(CaptureError::from_mysql)?;
        let hb_ns = self.cfg.heartbeat.as_nanos().min(u64::MAX as u128) as u64;
        conn.query_drop(format!("SET @master_heartbeat_period={hb_ns}"))
            .await
            .map_err(CaptureError::from_mysql)?;
        let req = BinlogStreamRequest::new(self.cfg.server_id)
            .with_filename(self.committed.file.as_bytes())
            .with_pos(self.committed.pos);
        let stream = conn
            .get_binlog_stream(req)
            .await
            .map_err(|e| self.classify(e))?;
        self.stream = Some(stream);
        self.file = self.committed.file.clone();
        self.pending = None;
        self.tables.clear();
        self.plain_maps.clear();
        self.stats.connects += 1;
        Ok(())
    }

    fn classify(&self, e: mysql_async::Error) -> CaptureError {
        if let mysql_async::Error::Server(ref s) = e {
            if s.code == 1236 {
                return CaptureError::BinlogPurged {
                    file: self.committed.file.clone(),
                    pos: self.committed.pos,
                    message: s.message.clone(),
                };
            }
        }
        CaptureError::from_mysql(e)
    }

    fn set_retrying(&self, state: Option<String>) {
        *self.cfg.retrying.lock().unwrap_or_else(|p| p.into_inner()) = state;
    }

    async fn backoff(&mut self, err: CaptureError) -> Result<()> {
        self.drop_connection();
        if !err.is_retryable() {
            return Err(err);
        }
        self.failures += 1;
        if self.failures >= 2 {
            self.set_retrying(Some(format!(
                "reading the upstream's binlog failed {} times in a row, retrying: {err}",
                self.failures
            )));
        }
        if let Some(max) = self.cfg.max_reconnects {
            if self.failures > max {
                return Err(err);
            }
        }
        let exp = self.failures.saturating_sub(1).min(16);
        let delay = self
            .cfg
            .backoff_initial
            .saturating_mul(1u32 << exp)
            .min(self.cfg.backoff_max);
        tokio::time::sleep(delay).await;
        Ok(())
    }

    /// The next complete transaction or resolved ts. Reconnects by itself on retryable errors;
    /// returns only fatal errors (or a retryable one after `max_reconnects`).
    pub async fn next(&mut self) -> Result<ReaderEvent> {
        loop {
            if let Some(start) = self.abort.take() {
                return Ok(ReaderEvent::Abort(start));
            }
            if let Some(chunk) = self.take_chunk() {
                return Ok(ReaderEvent::Chunk(chunk));
            }
            if self.stream.is_none() {
                if let Err(e) = self.connect().await {
                    self.backoff(e).await?;
                    continue;
                }
            }
            let idle = self.cfg.heartbeat.saturating_mul(4);
            let Some(stream) = self.stream.as_mut() else {
                continue;
            };
            let item = match tokio::time::timeout(idle, stream.next()).await {
                Err(_) => Err(CaptureError::Connection(format!(
                    "no event or heartbeat for {idle:?}"
                ))),
                Ok(None) => Err(CaptureError::Connection(
                    "binlog stream closed by the upstream".into(),
                )),
                Ok(Some(Err(e))) => Err(self.classify(e)),
                Ok(Some(Ok(ev))) => Ok(ev),
            };
            let ev = match item {
                Ok(ev) => ev,
                Err(e) => {
                    self.backoff(e).await?;
                    continue;
                }
            };
            self.stats.events += 1;
            match self.handle(ev) {
                Ok(Some(out)) => {
                    if self.failures > 0 {
                        self.failures = 0;
                        self.set_retrying(None);
                    }
                    return Ok(out);
                }
                Ok(None) => {}
                Err(e) => {
                    self.backoff(e).await?;
                }
            }
        }
    }

    /// Hands out the buffered rows of the open transaction once they exceed `chunk_bytes`.
    fn take_chunk(&mut self) -> Option<TxnChunk> {
        let p = self.pending.as_mut()?;
        if p.bytes < self.cfg.chunk_bytes || p.rows.is_empty() || p.statement.is_some() {
            return None;
        }
        let rows = std::mem::take(&mut p.rows);
        let first_seq = p.chunked;
        p.chunked += rows.len();
        p.bytes = 0;
        self.stats.chunks += 1;
        Some(TxnChunk {
            start: p.start.clone(),
            gtid: p.gtid,
            first_seq,
            rows,
        })
    }

    fn decode_err(&self, pos: u64, e: impl std::fmt::Display) -> CaptureError {
        CaptureError::Decode {
            file: self.file.clone(),
            pos,
            message: e.to_string(),
        }
    }

    /// One event from the stream: its checksum verified, then [`Self::dispatch`]ed.
    fn handle(&mut self, ev: Event) -> Result<Option<ReaderEvent>> {
        let header = ev.header();
        let start_pos = (header.log_pos() as u64).saturating_sub(header.event_size() as u64);
        // Checksum.
        if let (Some(sum), Ok(Some(alg))) = (ev.checksum(), ev.footer().get_checksum_alg()) {
            let expected = u32::from_le_bytes(sum);
            let computed = ev.calc_checksum(alg);
            if expected != computed {
                return Err(CaptureError::Checksum {
                    file: self.file.clone(),
                    pos: start_pos,
                    expected,
                    computed,
                });
            }
            self.stats.checksums_verified += 1;
        }
        self.dispatch(ev, start_pos)
    }

    /// One verified event by type (a compressed one as the plain event it stands for; its
    /// `start_pos` is the upstream's, from before inflating).
    fn dispatch(&mut self, ev: Event, start_pos: u64) -> Result<Option<ReaderEvent>> {
        let header = ev.header();
        let ty = header.event_type_raw();
        let end = header.log_pos() as u64;
        use mariadb_event::*;
        match ty {
            t if t == EventType::ROTATE_EVENT as u8 => self.rotate(&ev, end, start_pos),
            GTID => {
                let (gtid, flags) = parse_gtid_body(ev.data(), header.server_id())
                    .ok_or_else(|| self.decode_err(start_pos, "short GTID event"))?;
                self.pending = Some(Pending::starting(
                    BinlogPos::new(self.file.clone(), start_pos),
                    Some(gtid),
                    flags & GTID_FL_STANDALONE != 0,
                ));
                Ok(None)
            }
            ANNOTATE_ROWS | BINLOG_CHECKPOINT | GTID_LIST | START_ENCRYPTION => Ok(None),
            QUERY_COMPRESSED | FIRST_COMPRESSED_ROWS..=LAST_COMPRESSED_ROWS => {
                let plain = crate::compression::plain_event(&ev)
                    .map_err(|e| self.decode_err(start_pos, e))?;
                self.dispatch(plain, start_pos)
            }
            t if t == EventType::HEARTBEAT_EVENT as u8 => {
                if self.pending.is_none() {
                    if let Some(ts) = self.committed.ts() {
                        return Ok(Some(ReaderEvent::Resolved(ts)));
                    }
                }
                Ok(None)
            }
            t if t == EventType::TABLE_MAP_EVENT as u8 => self.table_map(&ev, start_pos),
            t if t == EventType::XID_EVENT as u8 => {
                self.finish(end, header.timestamp(), None).map(Some)
            }
            t if t == EventType::QUERY_EVENT as u8 => self.query_event(&ev, end, start_pos),
            t if (t >= EventType::WRITE_ROWS_EVENT_V1 as u8
                && t <= EventType::DELETE_ROWS_EVENT_V1 as u8)
                || (t >= EventType::WRITE_ROWS_EVENT as u8
                    && t <= EventType::DELETE_ROWS_EVENT as u8) =>
            {
                self.rows_event(&ev, start_pos)?;
                Ok(None)
            }
            t if t == EventType::PARTIAL_UPDATE_ROWS_EVENT as u8 => Err(self.decode_err(
                start_pos,
                "partial JSON updates: set binlog_row_value_options='' upstream",
            )),
            // Never skipped silently: every row of the transaction is inside it.
            MYSQL_TRANSACTION_PAYLOAD => Err(self.decode_err(
                start_pos,
                "a compressed transaction payload (a session or the server has \
                 binlog_transaction_compression=ON): set binlog_transaction_compression=OFF \
                 globally and in every session that writes",
            )),
            _ => Ok(None),
        }
    }

    /// ROTATE: the file name (a real rotation between transactions is a boundary).
    fn rotate(&mut self, ev: &Event, end: u64, start_pos: u64) -> Result<Option<ReaderEvent>> {
        let re: RotateEvent<'_> = ev.read_event().map_err(|e| self.decode_err(start_pos, e))?;
        let mut name = re.name_raw().to_vec();
        // The fake ROTATE precedes the format description, so the reader did not know
        // to strip its checksum: the name then carries 4 extra bytes.
        if file_index(&String::from_utf8_lossy(&name)).is_none() && name.len() > 4 {
            let trimmed = &name[..name.len() - 4];
            if file_index(&String::from_utf8_lossy(trimmed)).is_some() {
                name.truncate(name.len() - 4);
            }
        }
        let name = String::from_utf8(name).map_err(|e| self.decode_err(start_pos, e))?;
        self.file = name.clone();
        if end != 0 && self.pending.is_none() {
            // A real rotation between transactions: the new file is a boundary.
            self.committed = BinlogPos::new(name, re.position());
            if let Some(ts) = self.committed.ts() {
                return Ok(Some(ReaderEvent::Resolved(ts)));
            }
        }
        Ok(None)
    }

    /// QUERY: BEGIN/COMMIT/ROLLBACK, a DML statement (unreplicable), or a DDL.
    fn query_event(&mut self, ev: &Event, end: u64, start_pos: u64) -> Result<Option<ReaderEvent>> {
        let header = ev.header();
        let Some(EventData::QueryEvent(q)) =
            ev.read_data().map_err(|e| self.decode_err(start_pos, e))?
        else {
            return Ok(None);
        };
        let query = crate::session::statement_text(q.status_vars(), q.query_raw()).into_owned();
        let trimmed = query.trim();
        if trimmed.eq_ignore_ascii_case("BEGIN") {
            if self.pending.is_none() {
                self.pending = Some(Pending::starting(
                    BinlogPos::new(self.file.clone(), start_pos),
                    None,
                    false,
                ));
            }
            return Ok(None);
        }
        if trimmed.eq_ignore_ascii_case("COMMIT") {
            if self.pending.is_none() {
                return Ok(None);
            }
            return self.finish(end, header.timestamp(), None).map(Some);
        }
        if trimmed.eq_ignore_ascii_case("ROLLBACK") {
            // A rolled-back non-transactional group: its row changes did happen.
            if self.pending.is_none() {
                return Ok(None);
            }
            return self.finish(end, header.timestamp(), None).map(Some);
        }
        let stmt = Statement {
            database: q.schema().into_owned(),
            session: Box::new(crate::session::DdlSession {
                expected_error: (q.error_code() != 0).then_some(q.error_code()),
                ..crate::session::of_statement(q.status_vars(), &query)
            }),
            query,
        };
        if let Some(tables) = unreplicable::dml_tables(&stmt.query, &stmt.database) {
            return self.statement_dml(end, header.timestamp(), start_pos, &stmt, tables);
        }
        match &self.pending {
            Some(_) if !self.pending.as_ref().is_some_and(|p| p.standalone) => {
                // A statement inside a transaction: CREATE TABLE ... SELECT logs its
                // CREATE here, followed by the rows. Other statements (temporary
                // tables, ...) change no replicated schema.
                if crate::schema::is_schema_statement(&stmt.query) {
                    if let Some(p) = self.pending.as_mut() {
                        p.statement = Some(stmt);
                    }
                }
                Ok(None)
            }
            Some(_) => self.finish(end, header.timestamp(), Some(stmt)).map(Some),
            None => {
                self.pending = Some(Pending::starting(
                    BinlogPos::new(self.file.clone(), start_pos),
                    None,
                    true,
                ));
                self.finish(end, header.timestamp(), Some(stmt)).map(Some)
            }
        }
    }

    /// TABLE_MAP: the table's [`TableMeta`] (compressed column types read as the plain ones,
    /// the columns marked).
    fn table_map(&mut self, ev: &Event, start_pos: u64) -> Result<Option<ReaderEvent>> {
        let ty = EventType::TABLE_MAP_EVENT as u8;
        let post = crate::compression::post_header_len(ev, ty);
        let rebuilt = match crate::compression::plain_table_map(ev.data(), post) {
            Some((body, marks)) => Some((
                crate::compression::rebuild(ev, ty, body)
                    .map_err(|e| self.decode_err(start_pos, e))?,
                marks,
            )),
            None => None,
        };
        let (ev, compressed) = match &rebuilt {
            Some((e, marks)) => (e, marks.as_slice()),
            None => (ev, &[][..]),
        };
        let Some(EventData::TableMapEvent(tme)) =
            ev.read_data().map_err(|e| self.decode_err(start_pos, e))?
        else {
            return Ok(None);
        };
        let id = tme.table_id();
        let meta = match TableMeta::from_tme(&tme, compressed) {
            Ok(meta) => meta,
            Err(e) => {
                // Only this table stops: its rows are noted unreplicable, the others go on.
                self.tables.remove(&id);
                self.plain_maps.remove(&id);
                let table = (
                    tme.database_name().into_owned(),
                    tme.table_name().into_owned(),
                );
                self.bad_maps
                    .insert(id, unreplicable::table_map_problem(table, &e));
                return Ok(None);
            }
        };
        self.bad_maps.remove(&id);
        if compressed.is_empty() {
            self.plain_maps.remove(&id);
        } else {
            self.plain_maps.insert(id, tme.into_owned());
        }
        self.tables.insert(id, Arc::new(meta));
        Ok(None)
    }

    /// A DML statement logged as a statement: recorded as unreplicable in its transaction (a
    /// standalone one is its own transaction, finished here).
    fn statement_dml(
        &mut self,
        end: u64,
        timestamp: u32,
        start_pos: u64,
        stmt: &Statement,
        tables: Vec<(String, String)>,
    ) -> Result<Option<ReaderEvent>> {
        let standalone = self.pending.as_ref().is_none_or(|p| p.standalone);
        if self.pending.is_none() {
            self.pending = Some(Pending::starting(
                BinlogPos::new(self.file.clone(), start_pos),
                None,
                true,
            ));
        }
        self.note_unreplicable(Unreplicable {
            tables,
            reason: unreplicable::statement_reason(&stmt.query),
        });
        if standalone {
            return self.finish(end, timestamp, None).map(Some);
        }
        Ok(None)
    }

    fn note_unreplicable(&mut self, u: Unreplicable) {
        if let Some(p) = self.pending.as_mut() {
            if p.unreplicable.len() < unreplicable::MAX_PER_TRANSACTION
                && !p.unreplicable.iter().any(|x| x.tables == u.tables)
            {
                p.unreplicable.push(u);
            }
        }
    }

    fn rows_event(&mut self, ev: &Event, start_pos: u64) -> Result<()> {
        let Some(EventData::RowsEvent(rows)) =
            ev.read_data().map_err(|e| self.decode_err(start_pos, e))?
        else {
            return Ok(());
        };
        let Some(pending) = self.pending.as_mut() else {
            return Err(CaptureError::Decode {
                file: self.file.clone(),
                pos: start_pos,
                message: "ROWS event outside a transaction".into(),
            });
        };
        let table_id = rows.table_id();
        if let Some(u) = self.bad_maps.get(&table_id) {
            let u = u.clone();
            self.note_unreplicable(u);
            return Ok(());
        }
        let (Some(meta), Some(tme)) = (
            self.tables.get(&table_id),
            self.plain_maps
                .get(&table_id)
                .or_else(|| self.stream.as_ref().and_then(|s| s.get_tme(table_id))),
        ) else {
            return Err(CaptureError::Decode {
                file: self.file.clone(),
                pos: start_pos,
                message: format!("ROWS event for unknown table map id {table_id}"),
            });
        };
        let kind = match rows {
            RowsEventData::WriteRowsEventV1(_) | RowsEventData::WriteRowsEvent(_) => {
                RowKind::Insert
            }
            RowsEventData::UpdateRowsEventV1(_) | RowsEventData::UpdateRowsEvent(_) => {
                RowKind::Update
            }
            _ => RowKind::Delete,
        };
        pending.bytes += ev.data().len();
        if pending.bytes > self.cfg.max_txn_bytes.max(self.cfg.chunk_bytes)
            && pending.statement.is_some()
        {
            return Err(CaptureError::Decode {
                file: self.file.clone(),
                pos: start_pos,
                message: format!(
                    "transaction starting at {} exceeds max_txn_bytes ({} bytes)",
                    pending.start, self.cfg.max_txn_bytes
                ),
            });
        }
        // A row image without every column (binlog_row_image=MINIMAL/NOBLOB in the writing
        // session), or rows that cannot be decoded: that table's change is unreplicable, the
        // event is skipped, every other table goes on.
        let meta = meta.clone();
        let of = rows.num_columns() as usize;
        let present = [rows.columns_before_image(), rows.columns_after_image()]
            .into_iter()
            .flatten()
            .map(|b| b.count_ones())
            .min();
        let problem = match present.filter(|p| *p < of) {
            Some(p) => Err(unreplicable::image_reason(p, of)),
            None => decode_event_rows(&rows, &meta, tme, kind, self.cfg.fast_decode),
        };
        match problem {
            Ok(changes) => {
                if let Some(p) = self.pending.as_mut() {
                    if kind != RowKind::Insert {
                        note_parent_rows(&mut p.parents, &meta, kind, &changes);
                    }
                    p.rows.extend(changes);
                }
            }
            Err(reason) => self.note_unreplicable(Unreplicable {
                tables: vec![(meta.database.clone(), meta.table.clone())],
                reason,
            }),
        }
        Ok(())
    }

    fn finish(
        &mut self,
        end: u64,
        timestamp: u32,
        statement: Option<Statement>,
    ) -> Result<ReaderEvent> {
        let p =
            self.pending
                .take()
                .unwrap_or(Pending::starting(self.committed.clone(), None, true));
        let index = file_index(&self.file).ok_or_else(|| CaptureError::Decode {
            file: self.file.clone(),
            pos: end,
            message: "binlog file name has no numeric suffix".into(),
        })?;
        let endpos = BinlogPos::new(self.file.clone(), end);
        self.committed = endpos.clone();
        self.stats.transactions += 1;
        Ok(ReaderEvent::Transaction(Transaction {
            commit_ts: commit_ts(index, end),
            commit_time_ms: timestamp as u64 * 1000,
            start: p.start,
            end: endpos,
            gtid: p.gtid,
            rows: p.rows,
            statement: statement.or(p.statement),
            chunked_rows: p.chunked,
            unreplicable: p.unreplicable,
            parent_changes: p.parents,
        }))
    }
}

/// Records a DELETE or UPDATE event's rows for the foreign-key cascades they may cause.
fn note_parent_rows(
    parents: &mut crate::foreign_keys::ParentChanges,
    meta: &TableMeta,
    kind: RowKind,
    changes: &[RowChange],
) {
    let names: Vec<String> = match kind {
        RowKind::Update => meta.columns.iter().map(|c| c.name.clone()).collect(),
        _ => Vec::new(),
    };
    let updates = changes
        .iter()
        .filter(|_| kind == RowKind::Update)
        .filter_map(|c| Some((c.before.as_deref()?, c.after.as_deref()?)));
    crate::foreign_keys::note_rows(
        parents,
        (&meta.database, &meta.table),
        &names,
        kind == RowKind::Delete,
        updates,
    );
}

/// Decodes the rows of one ROWS event (the fast parser first, mysql_common's generic path for
/// what it does not support). `Err`: why they cannot be decoded.
fn decode_event_rows(
    rows: &RowsEventData<'_>,
    meta: &Arc<TableMeta>,
    tme: &mysql_async::binlog::events::TableMapEvent<'_>,
    kind: RowKind,
    fast: bool,
) -> std::result::Result<Vec<RowChange>, String> {
    let change = |(before, after)| RowChange {
        table: meta.clone(),
        kind,
        before,
        after,
    };
    if fast {
        let bb: Option<Vec<bool>> = rows
            .columns_before_image()
            .map(|b| b.iter().map(|x| *x).collect());
        let ab: Option<Vec<bool>> = rows
            .columns_after_image()
            .map(|b| b.iter().map(|x| *x).collect());
        match crate::rowimage::decode_rows(meta, bb.as_deref(), ab.as_deref(), rows.rows_data()) {
            Ok(decoded) => return Ok(decoded.into_iter().map(change).collect()),
            Err(crate::rowimage::FastPath::Error(e)) => {
                return Err(format!("rows capture cannot decode: {e}"))
            }
            Err(crate::rowimage::FastPath::Unsupported) => {}
        }
    }
    let conv = |row: Option<mysql_async::binlog::row::BinlogRow>| -> std::result::Result<Option<Vec<Value>>, DecodeError> {
        let Some(row) = row else { return Ok(None) };
        let vals = row.unwrap();
        if vals.len() != meta.columns.len() {
            return Err(DecodeError {
                column: meta.table.clone(),
                message: format!("row image has {} of {} columns: set binlog_row_image=FULL upstream", vals.len(), meta.columns.len()),
            });
        }
        vals.into_iter().zip(meta.columns.iter()).map(|(v, c)| c.decode(v)).collect::<std::result::Result<Vec<_>, _>>().map(Some)
    };
    let mut out = Vec::new();
    for r in rows.rows(tme) {
        let (before, after) = r.map_err(|e| format!("rows capture cannot decode: {e}"))?;
        let before = conv(before).map_err(|e| format!("rows capture cannot decode: {e}"))?;
        let after = conv(after).map_err(|e| format!("rows capture cannot decode: {e}"))?;
        out.push(change((before, after)));
    }
    Ok(out)
}

/// Reads `SHOW MASTER STATUS` (the current end of the binlog; `SHOW BINARY LOG STATUS` where
/// the first is gone, MySQL 8.4).
pub async fn master_position(conn: &mut mysql_async::Conn) -> Result<BinlogPos> {
    let row: Option<mysql_async::Row> = match conn.query_first("SHOW MASTER STATUS").await {
        Ok(r) => r,
        Err(first) => conn
            .query_first("SHOW BINARY LOG STATUS")
            .await
            .map_err(|_| CaptureError::from_mysql(first))?,
    };
    let row = row.ok_or_else(|| {
        CaptureError::Sql("SHOW MASTER STATUS returned nothing: is log_bin on?".into())
    })?;
    let file: Option<String> = row.get(0);
    let pos: Option<u64> = row.get(1);
    match (file, pos) {
        (Some(f), Some(p)) => Ok(BinlogPos::new(f, p)),
        _ => Err(CaptureError::Sql(
            "SHOW MASTER STATUS: unexpected columns".into(),
        )),
    }
}
