//! The MySQL-compatible sink (`mysql://user:pass@host:port/?worker-count=…&max-txn-row=…&safe-mode=…`).
//!
//! Invariants:
//! - rows are applied in the order written for any two rows that share a value of any unique key
//!   (primary or not, before or after image): a flush partitions its rows into components linked
//!   by shared key values, each component runs in order on one worker; flushes of one dispatcher
//!   never overlap; components go to workers in contiguous blocks (each worker its own key range);
//! - each worker applies its part of a flush in downstream transactions of at most `max-txn-row`
//!   rows, as multi-row statements (`REPLACE`/`INSERT … VALUES (…),(…)`, `DELETE … WHERE key IN`);
//!   in safe mode a run of at least [`LOAD_DATA_MIN_ROWS`] upserts of one table is instead one
//!   `LOAD DATA LOCAL INFILE … REPLACE` streamed from memory (same semantics as the `REPLACE` it
//!   stands for); if the downstream refuses it, the transaction is applied again as statements
//!   and statements are used from then on;
//! - in safe mode (default) inserts and updates are `REPLACE`, deletes are by key, so applying a
//!   prefix of the stream again (a replay from the checkpoint) ends in the upstream state;
//! - generated columns are never written (the downstream computes them; writing one is error
//!   1906): statements and `LOAD DATA` list only [`TableSchema::written_columns`] of the schema
//!   with the columns the downstream says it generates marked too (`generated`: a version
//!   rebuilt from the binlog cannot know them), and a keyless row is found by those columns; a
//!   generated column of the key is still used to find rows;
//! - a table with no primary or not-null unique key is refused ([`SinkError::TableRefused`])
//!   unless `force-replicate=true`; such tables are written without `REPLACE` (rows may duplicate
//!   on replay: documented in docs/sinks.md);
//! - a DDL runs under the upstream session it ran under (`sql_mode`, collations, time zone,
//!   `foreign_key_checks`: [`crate::ddl_session`]), on a connection closed afterwards (one
//!   that ran `USE d` keeps d's defaults from then, even across an `ALTER DATABASE d`);
//! - DDLs run in commit order, one at a time, recorded in `sluice_sink.ddl_ts` (changefeed,
//!   commit ts, finished): a finished DDL is skipped on replay; an unfinished one (crash between the
//!   DDL and its record: MariaDB DDL cannot share a transaction) runs again in an idempotent form
//!   (`IF [NOT] EXISTS`) and "already done" errors are then accepted;
//! - retryable errors are retried with doubling backoff up to `max-retries`; fatal ones (unknown
//!   column or table, bad data) surface at once with the server's message;
//! - no downstream call waits forever: connecting is bounded by `timeout`, every statement or
//!   transaction by `read-timeout`; an unanswered one is killed on the server before it is
//!   retried, so it can never commit behind a newer write;
//! - with a write fence ([`crate::fence`]) every downstream call that can write is checked
//!   immediately before it is sent: each attempt of a transaction (retries included) and again
//!   before its `COMMIT` (a refused commit rolls the transaction back), each DDL statement and
//!   `ddl_ts` record, each checkpoint write; a retryable error is not retried once the fence
//!   refuses. A refusal is [`SinkError::Fenced`] and nothing of the refused call is written;
//! - with `downstream-fence` (default) the node's check is backed inside the downstream
//!   ([`fence`]): a dispatcher claims its span before its first row write and each transaction
//!   of rows first checks the claim still holds, so a transaction of a paused node cannot commit
//!   behind its successor's writes ([`SinkError::Superseded`]).

pub mod config;
pub mod fence;
mod generated;

use crate::error::{Result, SinkError};
use crate::fence::BoundFence;
use crate::runner::{Backend, Runner, WriterSpec};
use crate::uri::MysqlConfig;
use crate::RowBatch;
use async_trait::async_trait;
use fence::SpanClaim;
use futures::StreamExt;
use mysql_async::prelude::Queryable;
use mysql_async::{Conn, OptsBuilder, Pool, PoolConstraints, PoolOpts, TxOpts};
use sluice_types::{
    ColumnDef, ColumnType, DdlEvent, DdlKind, RowEvent, RowKind, TableSchema, Ts, Value,
};
use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

/// The downstream schema holding Sluice's progress tables.
pub const PROGRESS_DB: &str = "sluice_sink";
/// How often buffered rows are flushed without being asked (a full batch goes at once). Short,
/// so a row waits for the downstream about as long as its apply takes: at 200 ms the median
/// steady lag at 5k rows/s was 106 ms, most of it this wait. Only dispatchers with rows buffered
/// are visited, so idle tables cost nothing; under load batches fill before the interval ends.
pub const MYSQL_FLUSH_INTERVAL: Duration = Duration::from_millis(20);
/// A dispatcher buffers up to `worker-count * max-txn-row * TXNS_PER_WORKER_PER_FLUSH` rows before
/// it flushes (so each worker gets several transactions per flush, fewer flush barriers; with
/// the defaults 16 * 512 * 4 = 32,768 rows).
pub const TXNS_PER_WORKER_PER_FLUSH: usize = 4;
/// Upper bound of one retry backoff step.
pub const MAX_BACKOFF: Duration = Duration::from_secs(10);
/// Server errors meaning "this DDL already took effect", accepted when replaying an unfinished DDL
/// (1517: duplicate partition name, 1507: no such partition to drop/reorganize, 4092: unknown
/// view, from a `DROP VIEW` replayed).
pub const DDL_ALREADY_DONE: &[u16] = &[
    1007, 1008, 1050, 1051, 1060, 1061, 1091, 1146, 1054, 1176, 1517, 1507, 4092,
];

/// A run of at least this many safe-mode upserts (inserts and updates) of one table is applied as
/// one `LOAD DATA LOCAL INFILE … REPLACE INTO TABLE` streamed from memory instead of a multi-row
/// `REPLACE` (same semantics: rows in order, each replacing every row it conflicts with on any
/// unique key). Shorter runs stay statements.
pub const LOAD_DATA_MIN_ROWS: usize = 16;
/// Errors meaning "LOAD DATA LOCAL is refused here" (server `local_infile=OFF`: 4166 on MariaDB
/// 10.5+, 1148 on older MariaDB and MySQL 5.x, 3948 on MySQL 8; 2068: refused on the client side). The sink then applies rows
/// as statements for the rest of its life.
pub const LOAD_DATA_REFUSED: &[u16] = &[4166, 1148, 3948, 2068];

/// The most placeholders one prepared statement may have (the protocol counts them in 16 bits).
pub const MAX_PLACEHOLDERS: usize = 65_535;

/// Quotes an identifier with backticks.
pub fn quote_ident(s: &str) -> String {
    format!("`{}`", s.replace('`', "``"))
}

/// A connection pool for a MySQL config (session in UTC, foreign key checks off).
pub fn pool(cfg: &MysqlConfig, max_conns: usize) -> Result<Pool> {
    pool_with(cfg, max_conns, None, None)
}

/// In-memory "files" for `LOAD DATA LOCAL INFILE`: the statement names a registered entry and
/// the connection's handler streams it. Names never touch the file system; an unknown name fails
/// the load (never an empty load).
#[derive(Default)]
pub struct Infiles {
    next: AtomicU64,
    data: StdMutex<HashMap<String, Vec<u8>>>,
}

impl Infiles {
    fn register(&self, data: Vec<u8>) -> String {
        let name = format!(
            "sluice-infile-{}",
            self.next.fetch_add(1, Ordering::Relaxed)
        );
        if let Ok(mut m) = self.data.lock() {
            m.insert(name.clone(), data);
        }
        name
    }
    fn forget(&self, name: &str) {
        if let Ok(mut m) = self.data.lock() {
            m.remove(name);
        }
    }
}

struct InfileHandler(Arc<Infiles>);

impl mysql_async::prelude::GlobalHandler for InfileHandler {
    fn handle(
        &self,
        file_name: &[u8],
    ) -> futures::future::BoxFuture<
        'static,
        std::result::Result<mysql_async::InfileData, mysql_async::LocalInfileError>,
    > {
        let name = String::from_utf8_lossy(file_name).into_owned();
        let data = self.0.data.lock().ok().and_then(|mut m| m.remove(&name));
        Box::pin(async move {
            let item: std::io::Result<Vec<u8>> = data
                .ok_or_else(|| std::io::Error::other(format!("no in-memory infile named {name}")));
            Ok(futures::stream::once(async move { item.map(Into::into) }).boxed())
        })
    }
}

/// The session settings every connection runs with. The `sql_mode` accepts every value an
/// upstream may have stored: rows reach the binlog as the upstream kept them, whatever its
/// session's mode (`INSERT IGNORE`, a non-strict session, `ALLOW_INVALID_DATES`), so the
/// downstream must not judge them again (a strict mode refuses an ENUM's `''` with 1265, a
/// `2020-02-31` with 1292). No strictness, no `NO_ZERO_DATE`/`NO_ZERO_IN_DATE`, invalid dates
/// allowed, and a `0` written into an AUTO_INCREMENT column stays `0` (`NO_AUTO_VALUE_ON_ZERO`);
/// nothing that changes how statements read (`ANSI_QUOTES`, `EMPTY_STRING_IS_NULL`, …). A DDL
/// runs under its upstream session's mode instead ([`crate::ddl_session`]). For the same reason
/// MariaDB (10.2.1+, the `/*M!` comment MySQL skips) does not check CHECK constraints on the
/// rows: an upstream session with `check_constraint_checks = 0` stored rows that violate them.
const SESSION_SETUP: [&str; 3] = [
    "SET time_zone = '+00:00'",
    "SET foreign_key_checks = 0",
    "SET sql_mode = 'ALLOW_INVALID_DATES,NO_AUTO_VALUE_ON_ZERO' /*M!100201 , check_constraint_checks = 0 */",
];

/// How long an idle pooled connection is kept before it is closed.
const IDLE_CONNECTION_TTL: Duration = Duration::from_secs(60);

/// A pool whose connections run [`SESSION_SETUP`] when they connect and after every reset
/// (`COM_RESET_CONNECTION` drops session variables: without the setup a reused connection would
/// leave UTC). With `infiles` (the sink's own pool) connections are not reset when they return
/// to the pool: a transaction left open is still rolled back by the driver, the session settings
/// and the prepared-statement cache survive, and each downstream transaction saves the reset
/// round trip and the re-prepare. Connections that change the default database (DDL) ask for a
/// reset themselves. `extra`: one more session statement (the downstream fence's).
fn pool_with(
    cfg: &MysqlConfig,
    max_conns: usize,
    infiles: Option<Arc<Infiles>>,
    extra: Option<String>,
) -> Result<Pool> {
    let constraints = PoolConstraints::new(0, max_conns.max(1))
        .ok_or_else(|| SinkError::invalid_uri(&cfg.host, "bad pool size"))?;
    let reset = infiles.is_none();
    let mut setup: Vec<String> = SESSION_SETUP.iter().map(|s| s.to_string()).collect();
    setup.extend(extra);
    let opts = conn_opts(cfg)
        .init(setup.clone())
        .setup(setup)
        .pool_opts(
            PoolOpts::default()
                .with_constraints(constraints)
                // Idle connections are kept (up to the pool's size) for this long: without a TTL
                // the driver keeps only `min` (0) and every transaction would connect anew.
                .with_inactive_connection_ttl(IDLE_CONNECTION_TTL)
                .with_reset_connection(reset),
        )
        .local_infile_handler(infiles.map(InfileHandler));
    Ok(Pool::new(opts))
}

/// A failed connection to the server `cfg` names, saying which server, address and user
/// (never the password).
pub(crate) fn login_error(
    cfg: &MysqlConfig,
    side: &'static str,
    fix: &'static str,
    e: mysql_async::Error,
) -> SinkError {
    let addr = format!("{}:{}", cfg.host, cfg.port);
    SinkError::connect(side, &cfg.user, addr, fix, e)
}

/// Options of one downstream connection (session in UTC, foreign key checks off).
fn conn_opts(cfg: &MysqlConfig) -> OptsBuilder {
    OptsBuilder::default()
        .ip_or_hostname(cfg.host.clone())
        .tcp_port(cfg.port)
        .user(Some(cfg.user.clone()))
        .pass(Some(cfg.password.expose().to_string()))
        .prefer_socket(false)
        .init(SESSION_SETUP.to_vec())
        .setup(SESSION_SETUP.to_vec())
}

/// The bound parameter for a value (times in UTC; ENUM/SET by name).
pub fn to_param(v: &Value) -> mysql_async::Value {
    use mysql_async::Value as M;
    match v {
        Value::Null => M::NULL,
        Value::Int(i) => M::Int(*i),
        Value::UInt(u) => M::UInt(*u),
        Value::Float(f) => M::Float(*f),
        Value::Double(d) => M::Double(*d),
        Value::Decimal(s) | Value::Text(s) | Value::Json(s) => M::Bytes(s.clone().into_bytes()),
        Value::Bytes(b) | Value::Geometry(b) => M::Bytes(b.clone()),
        Value::Date { year, month, day } => M::Date(*year, *month, *day, 0, 0, 0, 0),
        Value::Time {
            negative,
            hours,
            minutes,
            seconds,
            micros,
        } => M::Time(
            *negative,
            hours / 24,
            (hours % 24) as u8,
            *minutes,
            *seconds,
            *micros,
        ),
        Value::DateTime {
            year,
            month,
            day,
            hour,
            minute,
            second,
            micros,
        } => M::Date(*year, *month, *day, *hour, *minute, *second, *micros),
        Value::Timestamp { micros } => {
            let (y, m, d, h, mi, s, us) = crate::codec::utc_parts(*micros);
            M::Date(y as u16, m as u8, d as u8, h as u8, mi as u8, s as u8, us)
        }
        Value::Year(y) => M::UInt(u64::from(*y)),
        Value::Enum { name, .. } => M::Bytes(name.clone().into_bytes()),
        Value::Set { names, .. } => M::Bytes(names.join(",").into_bytes()),
        Value::Bit { bits, .. } => M::UInt(*bits),
    }
}

/// Rewrites a DDL into its idempotent form where MariaDB has one for the whole statement:
/// `CREATE TABLE|DATABASE|SCHEMA` gets `IF NOT EXISTS`, `DROP TABLE|DATABASE|SCHEMA|VIEW` gets
/// `IF EXISTS`, right after its first two words; the rest of the text is kept byte for byte.
/// Clauses inside an `ALTER` are never rewritten: MariaDB checks an `ADD COLUMN IF NOT EXISTS`
/// against the table before the statement, so `DROP COLUMN a, ADD COLUMN IF NOT EXISTS a …`
/// would silently keep the column dropped. A replayed or retried DDL accepts "already done"
/// errors instead ([`DDL_ALREADY_DONE`]).
pub fn idempotent_ddl(query: &str) -> String {
    let mut words = query
        .split_ascii_whitespace()
        .map(|w| (w.as_ptr() as usize - query.as_ptr() as usize, w));
    let (Some((_, first)), Some((at, second))) = (words.next(), words.next()) else {
        return query.to_string();
    };
    let third = words.next().map(|(_, w)| w.to_ascii_uppercase());
    let (first, second) = (first.to_ascii_uppercase(), second.to_ascii_uppercase());
    let insert = match (first.as_str(), second.as_str()) {
        ("CREATE", "TABLE" | "DATABASE" | "SCHEMA") => "IF NOT EXISTS",
        ("DROP", "TABLE" | "DATABASE" | "SCHEMA" | "VIEW") => "IF EXISTS",
        _ => return query.to_string(),
    };
    if third.as_deref() == Some("IF") {
        return query.to_string();
    }
    let end = at + second.len();
    format!("{} {insert}{}", &query[..end], &query[end..])
}

struct Pending {
    schema: Arc<TableSchema>,
    row: RowEvent,
}

pub struct MysqlWriter {
    rows: Vec<Pending>,
    /// The dispatcher's hold on its span downstream (`downstream-fence`).
    claim: Option<Arc<SpanClaim>>,
    /// The previous full batch, being applied while this one fills (at most one).
    in_flight: Option<tokio::task::JoinHandle<Result<()>>>,
    /// The rows buffered are parts of a transaction still open; with `transaction-atomicity =
    /// table` they wait for its end (one downstream transaction), held here whole.
    open: bool,
}

async fn join(h: tokio::task::JoinHandle<Result<()>>) -> Result<()> {
    h.await
        .map_err(|e| SinkError::contract("?", format!("apply task failed: {e}")))?
}

#[derive(Clone)]
pub struct Mysql {
    cfg: MysqlConfig,
    pool: Pool,
    changefeed: String,
    ddl_lock: Arc<tokio::sync::Mutex<()>>,
    infiles: Arc<Infiles>,
    /// Cleared for good once the downstream refuses `LOAD DATA LOCAL`.
    load_data: Arc<AtomicBool>,
    /// Debug holds of transactions of rows ([`fence::HoldAt`]).
    holds: Arc<fence::WriteHolds>,
    /// Per table version, the schema as written: the downstream's generated columns marked.
    generated: Arc<generated::DownstreamGenerated>,
}

pub type MysqlSink = Runner<Mysql>;

impl Runner<Mysql> {
    /// Connects for changefeed `"default"` (see [`Runner::connect_for`]).
    pub async fn connect(cfg: MysqlConfig) -> Result<MysqlSink> {
        Self::connect_for("default", cfg).await
    }

    /// Connects, creates the progress tables, and starts the flush ticker. `changefeed` keys the
    /// rows of `sluice_sink.ddl_ts` and `sluice_sink.checkpoint`.
    pub async fn connect_for(changefeed: &str, cfg: MysqlConfig) -> Result<MysqlSink> {
        Self::connect_with_holds(changefeed, cfg, Arc::default()).await
    }

    /// [`Self::connect_for`] with debug write holds shared with others (a node's sinks).
    pub async fn connect_with_holds(
        changefeed: &str,
        cfg: MysqlConfig,
        holds: Arc<fence::WriteHolds>,
    ) -> Result<MysqlSink> {
        let infiles = Arc::new(Infiles::default());
        let idle = cfg.downstream_fence.then(fence::idle_timeout_setup);
        let pool = pool_with(&cfg, cfg.worker_count + 2, Some(infiles.clone()), idle)?;
        let m = Mysql {
            cfg,
            pool,
            changefeed: changefeed.to_string(),
            ddl_lock: Arc::new(tokio::sync::Mutex::new(())),
            infiles,
            load_data: Arc::new(AtomicBool::new(true)),
            holds,
            generated: Arc::default(),
        };
        // Not fenced: idempotent, and no changefeed data (the sink is being opened).
        m.with_retry("create progress tables", &BoundFence::none(), |mut c| async move {
            c.query_drop(format!("CREATE DATABASE IF NOT EXISTS {PROGRESS_DB}")).await?;
            c.query_drop(format!(
                "CREATE TABLE IF NOT EXISTS {PROGRESS_DB}.ddl_ts (changefeed VARCHAR(255) NOT NULL, commit_ts BIGINT UNSIGNED NOT NULL, \
                 finished TINYINT NOT NULL, query LONGTEXT, PRIMARY KEY (changefeed, commit_ts))"
            ))
            .await?;
            c.query_drop(format!(
                "CREATE TABLE IF NOT EXISTS {PROGRESS_DB}.checkpoint (changefeed VARCHAR(255) NOT NULL PRIMARY KEY, checkpoint_ts BIGINT UNSIGNED NOT NULL)"
            ))
            .await?;
            for ddl in fence::tables_ddl() {
                c.query_drop(ddl).await?;
            }
            Ok(())
        })
        .await?;
        Ok(Runner::with_backend(m))
    }

    pub fn pool(&self) -> Pool {
        self.backend().pool.clone()
    }

    /// Deletes this changefeed id's `ddl_ts` and checkpoint rows (a changefeed created anew:
    /// what an earlier one of the same id recorded is not its progress).
    pub async fn forget_records(&self) -> Result<()> {
        let m = self.backend();
        let cf = m.changefeed.clone();
        m.with_retry("forget progress rows", &BoundFence::none(), |mut c| {
            let cf = cf.clone();
            async move {
                c.exec_drop(
                    format!("DELETE FROM {PROGRESS_DB}.ddl_ts WHERE changefeed = ?"),
                    (cf.clone(),),
                )
                .await?;
                c.exec_drop(
                    format!("DELETE FROM {PROGRESS_DB}.checkpoint WHERE changefeed = ?"),
                    (cf.clone(),),
                )
                .await?;
                for t in ["fence", "fence_tables"] {
                    c.exec_drop(
                        format!("DELETE FROM {PROGRESS_DB}.{t} WHERE changefeed = ?"),
                        (cf.clone(),),
                    )
                    .await?;
                }
                Ok(())
            }
        })
        .await
    }

    /// Debug hold (tests, `--enable-debug-holds`): while on, every transaction of rows waits at
    /// `at` as a process frozen there would.
    pub fn hold_writes(&self, at: fence::HoldAt, on: bool) {
        self.backend().holds.set(at, on);
    }

    /// Transactions waiting at the hold `at` now.
    pub fn writes_held(&self, at: fence::HoldAt) -> usize {
        self.backend().holds.waiting(at)
    }

    /// Whether runs of upserts are still applied with `LOAD DATA LOCAL` (false once the
    /// downstream refused it).
    pub fn uses_load_data(&self) -> bool {
        self.backend().load_data.load(Ordering::Relaxed)
    }
}

impl Mysql {
    /// Applies rows (one flush's worth) with every worker, in causality order.
    async fn apply_rows(
        &self,
        rows: &mut [Pending],
        fence: &BoundFence,
        claim: Option<&SpanClaim>,
    ) -> Result<()> {
        // Columns only the downstream knows it computes are not written either.
        let mut last: Option<(Arc<TableSchema>, Arc<TableSchema>)> = None;
        for p in rows.iter_mut() {
            let written = match &last {
                Some((from, to)) if Arc::ptr_eq(from, &p.schema) => to.clone(),
                _ => self.as_written(&p.schema).await?,
            };
            last = Some((p.schema.clone(), written.clone()));
            p.schema = written;
        }
        let rows: &[Pending] = rows;
        if let Some(claim) = claim.filter(|c| !c.is_claimed()) {
            // Before the dispatcher's first row write: take the span over downstream.
            self.with_retry("claim the span", fence, |c| claim.claim(c))
                .await?;
        }
        let atomic = self.cfg.table_atomicity;
        let parts = partition(rows, self.cfg.worker_count, atomic);
        let mut jobs = Vec::new();
        for part in parts.into_iter().filter(|p| !p.is_empty()) {
            jobs.push(async move {
                // One downstream transaction per max-txn-row rows of this worker (never splitting
                // an upstream transaction with transaction-atomicity=table).
                for chunk in txn_chunks(&part, self.cfg.max_txn_row, atomic) {
                    self.apply_txn(chunk, fence, claim).await?;
                }
                Ok::<(), SinkError>(())
            });
        }
        let results = futures::future::join_all(jobs).await;
        for r in results {
            r?;
        }
        Ok(())
    }

    /// Applies one downstream transaction (one worker's rows, in order), retrying retryable
    /// errors; falls back to statements for good when the downstream refuses `LOAD DATA LOCAL`.
    async fn apply_txn(
        &self,
        chunk: &[&Pending],
        fence: &BoundFence,
        claim: Option<&SpanClaim>,
    ) -> Result<()> {
        let mut load = self.load_data.load(Ordering::Relaxed);
        loop {
            let stmts = Arc::new(build_statements(
                chunk,
                self.cfg.safe_mode,
                self.cfg.max_txn_row,
                load,
            )?);
            let loads = stmts.iter().any(|s| matches!(s, Stmt::Load { .. }));
            let res = self
                .with_retry("apply rows", fence, |mut c| {
                    let stmts = stmts.clone();
                    let infiles = self.infiles.clone();
                    let holds = self.holds.clone();
                    async move {
                        holds.wait(fence::HoldAt::Send).await;
                        if stmts.len() == 1 && claim.is_none() {
                            // One statement is atomic on its own: no BEGIN/COMMIT round trips.
                            // (`with_retry` checked the fence just before this call.)
                            return run_stmt(&mut c, &infiles, &stmts[0]).await;
                        }
                        let Some(claim) = claim else {
                            let mut tx = c.start_transaction(TxOpts::default()).await?;
                            for st in stmts.iter() {
                                run_stmt(&mut tx, &infiles, st).await?;
                            }
                            // Nothing of the transaction is visible before its commit: check
                            // again, a refused commit rolls it back (the transaction is dropped).
                            fenced_driver(fence, "commit rows")?;
                            holds.wait(fence::HoldAt::Commit).await;
                            return tx.commit().await;
                        };
                        // Any error below leaves the transaction to the reset that
                        // `begin_checked` asked for (the connection goes back to the pool).
                        claim.begin_checked(&mut c).await?;
                        let Some((last, first)) = stmts.split_last() else {
                            return Ok(());
                        };
                        for st in first {
                            run_stmt(&mut c, &infiles, st).await?;
                        }
                        if holds.is_on(fence::HoldAt::Commit) {
                            // Debug: held between the last statement and the COMMIT.
                            run_stmt(&mut c, &infiles, last).await?;
                            fenced_driver(fence, "commit rows")?;
                            holds.wait(fence::HoldAt::Commit).await;
                            c.query_drop("COMMIT").await?;
                        } else {
                            // The fence row is held shared since the check: the last statement
                            // and the COMMIT go together (one round trip for a `LOAD DATA`).
                            fenced_driver(fence, "commit rows")?;
                            run_last_and_commit(&mut c, &infiles, last).await?;
                        }
                        c.reset_connection(false);
                        Ok(())
                    }
                })
                .await;
            match res {
                Err(SinkError::Db {
                    code: Some(code), ..
                }) if loads && LOAD_DATA_REFUSED.contains(&code) => {
                    // Nothing of the transaction committed: apply it again as statements.
                    self.load_data.store(false, Ordering::Relaxed);
                    load = false;
                }
                other => return other,
            }
        }
    }

    /// Runs `f` on a fresh pooled connection, retrying retryable errors with backoff. The fence
    /// is checked immediately before each attempt (once the connection is at hand) and before
    /// each retry; a [`SinkError`] `f` returns inside `mysql_async::Error::Other` (see
    /// [`fenced_driver`]) is returned as it is, never retried.
    async fn with_retry<F, Fut, T>(&self, what: &str, fence: &BoundFence, f: F) -> Result<T>
    where
        F: Fn(Conn) -> Fut,
        Fut: std::future::Future<Output = std::result::Result<T, mysql_async::Error>>,
    {
        self.with_retry_within(what, Some(self.cfg.read_timeout), fence, f)
            .await
    }

    /// [`Self::with_retry`] with an explicit answer timeout (`None`: wait as long as the server
    /// works, for DDLs, which may legitimately run for hours).
    async fn with_retry_within<F, Fut, T>(
        &self,
        what: &str,
        read_timeout: Option<Duration>,
        fence: &BoundFence,
        f: F,
    ) -> Result<T>
    where
        F: Fn(Conn) -> Fut,
        Fut: std::future::Future<Output = std::result::Result<T, mysql_async::Error>>,
    {
        let mut backoff = self.cfg.retry_backoff;
        let mut attempt = 0;
        loop {
            let res = match tokio::time::timeout(self.cfg.timeout, self.pool.get_conn()).await {
                Err(_) => Err(SinkError::Timeout {
                    what: format!("connection for {what}"),
                    after: self.cfg.timeout,
                    param: "timeout",
                    killed: String::new(),
                }),
                Ok(Err(e)) => Err(login_error(&self.cfg, "downstream", "the sink URI", e)),
                Ok(Ok(c)) => {
                    // Immediately before the call (a refused one returns the connection).
                    fence.check(what)?;
                    let id = c.id();
                    let call = f(c);
                    let answered = match read_timeout {
                        None => Ok(call.await),
                        Some(limit) => tokio::time::timeout(limit, call).await.map_err(|_| limit),
                    };
                    match answered {
                        Ok(Err(mysql_async::Error::Other(e))) => match e.downcast::<SinkError>() {
                            Ok(refused) => {
                                if matches!(*refused, SinkError::Superseded { .. }) {
                                    self.holds.count_refused();
                                }
                                return Err(*refused);
                            }
                            Err(e) => Err(SinkError::db(what, mysql_async::Error::Other(e))),
                        },
                        Ok(r) => r.map_err(|e| SinkError::db(what, e)),
                        Err(limit) => Err(SinkError::Timeout {
                            what: what.to_string(),
                            after: limit,
                            param: "read-timeout",
                            killed: self.kill(id).await,
                        }),
                    }
                }
            };
            match res {
                Ok(v) => return Ok(v),
                Err(err) => {
                    if !err.is_retryable() || attempt >= self.cfg.max_retries {
                        return Err(err);
                    }
                    // A node that may not write any more does not retry.
                    fence.check(what)?;
                    attempt += 1;
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
            }
        }
    }

    /// Ends an unanswered downstream connection on the server (`KILL CONNECTION`, from a new
    /// connection: the pool may be full of stuck ones), so its transaction rolls back instead of
    /// committing later, behind newer writes of the same keys (a retry of the same rows waits on
    /// the row locks the killed transaction holds until its rollback ends). Says what happened.
    async fn kill(&self, id: u32) -> String {
        let attempt = async {
            let mut c = Conn::new(conn_opts(&self.cfg)).await?;
            c.query_drop(format!("KILL CONNECTION {id}")).await?;
            c.disconnect().await
        };
        match tokio::time::timeout(self.cfg.timeout, attempt).await {
            Ok(Ok(())) => format!("; connection {id} was killed on the server"),
            // Already gone: nothing of it can commit any more.
            Ok(Err(mysql_async::Error::Server(e))) if e.code == 1094 => {
                format!("; connection {id} had already ended")
            }
            Ok(Err(e)) => format!("; killing connection {id} failed: {e}"),
            Err(_) => format!("; killing connection {id} timed out"),
        }
    }

    fn check_table(&self, schema: &TableSchema) -> Result<()> {
        if schema.key_columns.is_empty() && !self.cfg.force_replicate {
            return Err(SinkError::TableRefused {
                table: schema.qualified_name(),
                reason: "no primary key and no not-null unique key (set force-replicate=true to accept duplicates on replay)".into(),
            });
        }
        Ok(())
    }
}

/// Checks the fence inside a driver call (`with_retry`'s closure): a refusal travels as
/// `mysql_async::Error::Other` holding the [`SinkError::Fenced`], which `with_retry` returns as
/// it is.
fn fenced_driver(fence: &BoundFence, what: &str) -> std::result::Result<(), mysql_async::Error> {
    fence
        .check(what)
        .map_err(|e| mysql_async::Error::Other(Box::new(e)))
}

/// One statement of a downstream transaction.
enum Stmt {
    /// A prepared statement and its parameters.
    Exec(String, Vec<mysql_async::Value>),
    /// `LOAD DATA LOCAL INFILE` (the file name is filled in per attempt) and the file's bytes.
    Load { sql: String, data: Vec<u8> },
}

/// The placeholder for the in-memory file name in a [`Stmt::Load`] statement.
const INFILE_NAME: &str = "{infile}";

/// One attempt at a DDL on `c`: the upstream session's database and settings, a last fence
/// check, the statement. `retry`: an earlier attempt may have taken effect, so "already done"
/// errors are success.
async fn apply_ddl_on(
    c: &mut Conn,
    db: &str,
    query: &str,
    session: &sluice_types::DdlSession,
    kind: DdlKind,
    retry: bool,
    fence: &BoundFence,
) -> std::result::Result<(), mysql_async::Error> {
    if !db.is_empty() {
        if let Err(e) = c.query_drop(format!("USE {}", quote_ident(db))).await {
            match &e {
                mysql_async::Error::Server(s) if s.code == 1049 => {}
                _ => return Err(e),
            }
        }
    }
    // The upstream session's sql_mode, collations, ... (the connection is closed after).
    crate::ddl_session::enter(c, session).await?;
    // The round trips: check again right before the DDL.
    fenced_driver(fence, "apply DDL")?;
    match c.query_drop(query).await {
        // The statement failed upstream too, after changing something (it was logged with its
        // error): the same error here means the same was done.
        Err(mysql_async::Error::Server(e)) if session.expected_error == Some(e.code) => Ok(()),
        Err(mysql_async::Error::Server(e)) if retry && DDL_ALREADY_DONE.contains(&e.code) => Ok(()),
        // The defaults of a database the downstream does not have (one the changefeed does
        // not replicate): nothing to change.
        Err(mysql_async::Error::Server(e)) if kind == DdlKind::AlterDatabase && e.code == 1049 => {
            Ok(())
        }
        other => other,
    }
}

async fn run_stmt<Q: Queryable>(
    c: &mut Q,
    infiles: &Infiles,
    st: &Stmt,
) -> std::result::Result<(), mysql_async::Error> {
    match st {
        Stmt::Exec(sql, params) => c.exec_drop(sql.as_str(), params.clone()).await,
        Stmt::Load { sql, data } => run_load(c, infiles, sql, data, "").await,
    }
}

/// A `LOAD DATA` with its file served from memory, and `then` (more statements of the same
/// query, such as `; COMMIT`: the server stops at the first error).
async fn run_load<Q: Queryable>(
    c: &mut Q,
    infiles: &Infiles,
    sql: &str,
    data: &[u8],
    then: &str,
) -> std::result::Result<(), mysql_async::Error> {
    let name = infiles.register(data.to_vec());
    let res = c
        .query_drop(format!("{}{then}", sql.replacen(INFILE_NAME, &name, 1)))
        .await;
    infiles.forget(&name);
    res
}

/// The last statement of a transaction and its `COMMIT`: a `LOAD DATA` (a text query) and the
/// `COMMIT` in one multi-statement query (the server stops at the first error, so a failed load
/// is not committed); a prepared statement, then the `COMMIT`.
async fn run_last_and_commit(
    c: &mut Conn,
    infiles: &Infiles,
    st: &Stmt,
) -> std::result::Result<(), mysql_async::Error> {
    match st {
        Stmt::Exec(..) => {
            run_stmt(c, infiles, st).await?;
            c.query_drop("COMMIT").await
        }
        Stmt::Load { sql, data } => run_load(c, infiles, sql, data, "; COMMIT").await,
    }
}

/// How a column travels in a `LOAD DATA` file.
#[derive(Clone, Copy, PartialEq)]
enum LoadCol {
    /// As text, in the file's escaping (tab-separated, `\` escapes, `\N` for NULL).
    Text,
    /// Hex digits into a user variable, stored with `UNHEX` (binary strings, geometry).
    Hex,
    /// Decimal digits into a user variable, stored as an unsigned integer (BIT).
    Bits,
}

fn load_col(c: &ColumnDef) -> LoadCol {
    if raw_charset(c).is_some() {
        return LoadCol::Hex;
    }
    match c.ty {
        ColumnType::Binary | ColumnType::VarBinary | ColumnType::Blob | ColumnType::Geometry => {
            LoadCol::Hex
        }
        ColumnType::Bit => LoadCol::Bits,
        _ => LoadCol::Text,
    }
}

fn escape_into(out: &mut Vec<u8>, s: &[u8]) {
    for &b in s {
        match b {
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\t' => out.extend_from_slice(b"\\t"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            0 => out.extend_from_slice(b"\\0"),
            _ => out.push(b),
        }
    }
}

fn frac6(out: &mut Vec<u8>, micros: u32) {
    use std::io::Write;
    if micros != 0 {
        let _ = write!(out, ".{micros:06}");
    }
}

/// Appends one field of a `LOAD DATA` file; false when the value cannot travel this way exactly
/// (the run then stays a `REPLACE` statement).
fn load_field(out: &mut Vec<u8>, v: &Value, how: LoadCol) -> bool {
    use std::io::Write;
    if matches!(v, Value::Null) {
        out.extend_from_slice(b"\\N");
        return true;
    }
    match how {
        LoadCol::Hex => {
            let b: &[u8] = match v {
                Value::Bytes(b) | Value::Geometry(b) => b,
                Value::Text(s) => s.as_bytes(),
                _ => return false,
            };
            hex_into(out, b);
            true
        }
        LoadCol::Bits => match v {
            Value::Bit { bits, .. } | Value::UInt(bits) => write!(out, "{bits}").is_ok(),
            Value::Int(i) if *i >= 0 => write!(out, "{i}").is_ok(),
            _ => false,
        },
        LoadCol::Text => match v {
            Value::Null => unreachable!("handled above"),
            Value::Int(i) => write!(out, "{i}").is_ok(),
            Value::UInt(u) => write!(out, "{u}").is_ok(),
            // Shortest round-trip digits; a FLOAT travels as its exact double value.
            Value::Float(f) if f.is_finite() => write!(out, "{:e}", f64::from(*f)).is_ok(),
            Value::Double(d) if d.is_finite() => write!(out, "{d:e}").is_ok(),
            Value::Float(_) | Value::Double(_) => false,
            Value::Decimal(s) | Value::Text(s) | Value::Json(s) => {
                escape_into(out, s.as_bytes());
                true
            }
            Value::Enum { name, .. } => {
                escape_into(out, name.as_bytes());
                true
            }
            Value::Set { names, .. } => {
                escape_into(out, names.join(",").as_bytes());
                true
            }
            Value::Bytes(_) | Value::Geometry(_) => false,
            Value::Date { year, month, day } => {
                write!(out, "{year:04}-{month:02}-{day:02}").is_ok()
            }
            Value::Time {
                negative,
                hours,
                minutes,
                seconds,
                micros,
            } => {
                let sign = if *negative { "-" } else { "" };
                let ok = write!(out, "{sign}{hours:02}:{minutes:02}:{seconds:02}").is_ok();
                frac6(out, *micros);
                ok
            }
            Value::DateTime {
                year,
                month,
                day,
                hour,
                minute,
                second,
                micros,
            } => {
                let ok = write!(
                    out,
                    "{year:04}-{month:02}-{day:02} {hour:02}:{minute:02}:{second:02}"
                )
                .is_ok();
                frac6(out, *micros);
                ok
            }
            Value::Timestamp { micros } => {
                let (y, m, d, h, mi, s, us) = crate::codec::utc_parts(*micros);
                let ok = write!(out, "{y:04}-{m:02}-{d:02} {h:02}:{mi:02}:{s:02}").is_ok();
                frac6(out, us);
                ok
            }
            Value::Year(y) => write!(out, "{y:04}").is_ok(),
            Value::Bit { bits, .. } => write!(out, "{bits}").is_ok(),
        },
    }
}

/// `LOAD DATA LOCAL INFILE … REPLACE` of the after images of `rows` (upserts of one table), or
/// `None` when some value cannot travel in the file exactly.
fn build_load(rows: &[&Pending]) -> Option<Stmt> {
    let s = &rows[0].schema;
    let cols = s.written_columns();
    let how: Vec<LoadCol> = cols.iter().map(|i| load_col(&s.columns[*i])).collect();
    let mut data = Vec::with_capacity(rows.len() * 64);
    for p in rows {
        let a = p.row.after.as_ref()?;
        if a.len() != s.columns.len() {
            return None;
        }
        for (k, (i, h)) in cols.iter().zip(&how).enumerate() {
            if k > 0 {
                data.push(b'\t');
            }
            if !load_field(&mut data, &a[*i], *h) {
                return None;
            }
        }
        data.push(b'\n');
    }
    let mut targets = Vec::with_capacity(how.len());
    let mut sets = Vec::new();
    for (k, (c, h)) in cols.iter().map(|i| &s.columns[*i]).zip(&how).enumerate() {
        match h {
            LoadCol::Text => targets.push(quote_ident(&c.name)),
            LoadCol::Hex => {
                targets.push(format!("@c{k}"));
                let value = match raw_charset(c) {
                    Some(cs) => format!("CONVERT(UNHEX(@c{k}) USING {cs})"),
                    None => format!("UNHEX(@c{k})"),
                };
                sets.push(format!("{} = {value}", quote_ident(&c.name)));
            }
            LoadCol::Bits => {
                targets.push(format!("@c{k}"));
                sets.push(format!(
                    "{} = CAST(@c{k} AS UNSIGNED)",
                    quote_ident(&c.name)
                ));
            }
        }
    }
    // Default field and line format: tab-separated, backslash escapes, `\n` lines.
    let mut sql = format!(
        "LOAD DATA LOCAL INFILE '{INFILE_NAME}' REPLACE INTO TABLE {} CHARACTER SET utf8mb4 ({})",
        table_ref(s),
        targets.join(",")
    );
    if !sets.is_empty() {
        sql.push_str(" SET ");
        sql.push_str(&sets.join(","));
    }
    Some(Stmt::Load { sql, data })
}

fn table_ref(s: &TableSchema) -> String {
    format!("{}.{}", quote_ident(&s.database), quote_ident(&s.name))
}

/// The quoted names of columns `cols` of `s`.
fn col_list(s: &TableSchema, cols: &[usize]) -> String {
    cols.iter()
        .map(|i| quote_ident(&s.columns[*i].name))
        .collect::<Vec<_>>()
        .join(",")
}

/// The values of columns `cols` of a row image of `s`, as statement parameters.
fn params_of<'a>(
    s: &'a TableSchema,
    image: &'a [Value],
    cols: &'a [usize],
) -> impl Iterator<Item = mysql_async::Value> + 'a {
    cols.iter()
        .map(|i| column_param(&s.columns[*i], &image[*i]))
}

/// The parameter of one value of column `c`: a value of a [`raw_charset`] column travels as
/// the hex of its bytes (the server converts every string parameter from the connection's
/// charset, which would replace bytes that are not utf8mb4 by `?`), everything else as
/// [`to_param`] makes it.
fn column_param(c: &ColumnDef, v: &Value) -> mysql_async::Value {
    let bytes = match v {
        Value::Text(t) => t.as_bytes(),
        Value::Bytes(b) => b.as_slice(),
        _ => return to_param(v),
    };
    if raw_charset(c).is_none() {
        return to_param(v);
    }
    let mut hex = Vec::with_capacity(bytes.len() * 2);
    hex_into(&mut hex, bytes);
    mysql_async::Value::Bytes(hex)
}

/// Appends the upper-case hex digits of `b`.
fn hex_into(out: &mut Vec<u8>, b: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for x in b {
        out.push(HEX[(x >> 4) as usize]);
        out.push(HEX[(x & 15) as usize]);
    }
}

/// The charset of a string column whose values capture hands over as the upstream's own bytes
/// (every charset but UTF-8, latin1 and ASCII, which capture turns into text: koi8r, cp1251,
/// gbk, sjis, utf16, …). Such a value is bound as bytes and converted by the downstream
/// ([`placeholder`], [`column_param`]), never read as the connection's utf8mb4.
fn raw_charset(c: &ColumnDef) -> Option<&str> {
    if !matches!(
        c.ty,
        ColumnType::Char | ColumnType::VarChar | ColumnType::Text
    ) {
        return None;
    }
    let cs = c.charset.as_deref()?;
    let known = matches!(
        cs,
        "utf8mb4" | "utf8mb3" | "utf8" | "latin1" | "ascii" | "binary"
    );
    let plain = cs.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    (!known && plain).then_some(cs)
}

/// The placeholder of one value of column `c`.
fn placeholder(c: &ColumnDef) -> String {
    match raw_charset(c) {
        Some(cs) => format!("CONVERT(UNHEX(?) USING {cs})"),
        None => "?".to_string(),
    }
}

/// `(?,?,…)` for the columns `cols` of `s`.
fn placeholders(s: &TableSchema, cols: &[usize]) -> String {
    let list: Vec<String> = cols.iter().map(|i| placeholder(&s.columns[*i])).collect();
    format!("({})", list.join(","))
}

/// How a row is written: upserts, inserts and keyed deletes of one table version are batched;
/// the rest (updates outside safe mode, keyless rows) take one statement each.
#[derive(Clone, Copy, PartialEq)]
enum RowClass {
    Upsert,
    Insert,
    Delete,
    Single,
}

impl RowClass {
    fn of(p: &Pending, safe_mode: bool) -> Self {
        let keyed = !p.schema.key_columns.is_empty();
        match p.row.kind {
            RowKind::Insert if safe_mode && keyed => Self::Upsert,
            RowKind::Update if safe_mode && keyed => Self::Upsert,
            RowKind::Insert => Self::Insert,
            RowKind::Delete if keyed => Self::Delete,
            _ => Self::Single,
        }
    }
}

/// The row's after image (`after`) or before image, with a value for every column.
fn row_image(p: &Pending, after: bool) -> Result<Vec<Value>> {
    let v = if after {
        p.row.after.clone()
    } else {
        p.row.before.clone()
    };
    let v = v.ok_or_else(|| {
        SinkError::Codec(format!(
            "{}: {:?} row without its image",
            p.schema.qualified_name(),
            p.row.kind
        ))
    })?;
    if v.len() != p.schema.columns.len() {
        return Err(SinkError::Codec(format!(
            "{}: row has {} values for {} columns",
            p.schema.qualified_name(),
            v.len(),
            p.schema.columns.len()
        )));
    }
    Ok(v)
}

/// The end of the run from `i` that one statement may carry: rows of class `c` of the same
/// table version, at most `max_rows` (a `Single` row runs alone).
fn run_end(rows: &[&Pending], i: usize, c: RowClass, safe_mode: bool, max_rows: usize) -> usize {
    let first = rows[i];
    let mut j = i + 1;
    if c != RowClass::Single {
        while j < rows.len()
            && j - i < max_rows
            && RowClass::of(rows[j], safe_mode) == c
            && Arc::ptr_eq(&rows[j].schema, &first.schema)
        {
            j += 1;
        }
    }
    j
}

/// The statements applying `rows` (one worker's share, in order).
fn build_statements(
    rows: &[&Pending],
    safe_mode: bool,
    max_rows: usize,
    load_data: bool,
) -> Result<Vec<Stmt>> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < rows.len() {
        let first = rows[i];
        let c = RowClass::of(first, safe_mode);
        let mut j = run_end(rows, i, c, safe_mode, max_rows);
        let s = &first.schema;
        // Generated columns are computed downstream and never written.
        let cols = s.written_columns();
        if c == RowClass::Upsert && load_data && j - i >= LOAD_DATA_MIN_ROWS {
            if let Some(load) = build_load(&rows[i..j]) {
                out.push(load);
                i = j;
                continue;
            }
        }
        // A statement binds at most MAX_PLACEHOLDERS values: wide tables get fewer rows each.
        let width = match c {
            RowClass::Delete => s.key_columns.len(),
            _ => cols.len(),
        };
        j = j.min(i + (MAX_PLACEHOLDERS / width.max(1)).max(1));
        let run = &rows[i..j];
        out.push(match c {
            RowClass::Upsert => insert_rows("REPLACE", run, &cols)?,
            RowClass::Insert => insert_rows("INSERT", run, &cols)?,
            RowClass::Delete => delete_rows(run)?,
            RowClass::Single => single_row(first, &cols)?,
        });
        i = j;
    }
    Ok(out)
}

/// One `verb INTO … VALUES (…),(…)` (`INSERT` or `REPLACE`) of the after images of `run`.
fn insert_rows(verb: &str, run: &[&Pending], cols: &[usize]) -> Result<Stmt> {
    let s = &run[0].schema;
    let mut params = Vec::new();
    for p in run {
        params.extend(params_of(s, &row_image(p, true)?, cols));
    }
    let vals = vec![placeholders(s, cols); run.len()].join(",");
    Ok(Stmt::Exec(
        format!(
            "{verb} INTO {} ({}) VALUES {vals}",
            table_ref(s),
            col_list(s, cols)
        ),
        params,
    ))
}

/// One `DELETE … WHERE (key) IN (…)` of the rows of `run`, by their before images' keys.
fn delete_rows(run: &[&Pending]) -> Result<Stmt> {
    let s = &run[0].schema;
    let keys: Vec<String> = s
        .key_columns
        .iter()
        .map(|k| quote_ident(&s.columns[*k].name))
        .collect();
    let mut params = Vec::new();
    for p in run {
        let b = row_image(p, false)?;
        params.extend(params_of(s, &b, &s.key_columns));
    }
    let tuple = placeholders(s, &s.key_columns);
    let sql = format!(
        "DELETE FROM {} WHERE ({}) IN ({})",
        table_ref(s),
        keys.join(","),
        vec![tuple; run.len()].join(",")
    );
    Ok(Stmt::Exec(sql, params))
}

/// How a single-row statement finds its row downstream.
struct RowMatch {
    /// The columns compared: the key, or (keyless) every written column.
    cols: Vec<usize>,
    /// `col <=> ? AND …` over `cols`.
    cond: String,
    /// ` LIMIT 1` for a keyless table (one of several equal rows), else empty.
    limit: &'static str,
}

impl RowMatch {
    fn of(s: &TableSchema, written: &[usize]) -> Self {
        let keyed = !s.key_columns.is_empty();
        let cols: Vec<usize> = if keyed {
            s.key_columns.clone()
        } else {
            written.to_vec()
        };
        let cond = cols
            .iter()
            .map(|k| {
                let c = &s.columns[*k];
                format!("{} <=> {}", quote_ident(&c.name), placeholder(c))
            })
            .collect::<Vec<_>>()
            .join(" AND ");
        let limit = if keyed { "" } else { " LIMIT 1" };
        RowMatch { cols, cond, limit }
    }
}

/// The statement of one row: updates outside safe mode, and rows of keyless tables. A keyless
/// row is found by its written columns (generated ones follow from them).
fn single_row(p: &Pending, cols: &[usize]) -> Result<Stmt> {
    let m = RowMatch::of(&p.schema, cols);
    match p.row.kind {
        RowKind::Update => update_row(p, cols, &m),
        RowKind::Delete => delete_row(p, &m),
        RowKind::Insert => insert_row(p, cols),
    }
}

fn update_row(p: &Pending, cols: &[usize], m: &RowMatch) -> Result<Stmt> {
    let s = &p.schema;
    let (b, a) = (row_image(p, false)?, row_image(p, true)?);
    let set = cols
        .iter()
        .map(|i| {
            let c = &s.columns[*i];
            format!("{} = {}", quote_ident(&c.name), placeholder(c))
        })
        .collect::<Vec<_>>()
        .join(",");
    let mut params: Vec<_> = params_of(s, &a, cols).collect();
    params.extend(params_of(s, &b, &m.cols));
    Ok(Stmt::Exec(
        format!(
            "UPDATE {} SET {set} WHERE {}{}",
            table_ref(s),
            m.cond,
            m.limit
        ),
        params,
    ))
}

fn delete_row(p: &Pending, m: &RowMatch) -> Result<Stmt> {
    let b = row_image(p, false)?;
    let params = params_of(&p.schema, &b, &m.cols).collect();
    Ok(Stmt::Exec(
        format!(
            "DELETE FROM {} WHERE {}{}",
            table_ref(&p.schema),
            m.cond,
            m.limit
        ),
        params,
    ))
}

fn insert_row(p: &Pending, cols: &[usize]) -> Result<Stmt> {
    let s = &p.schema;
    let a = row_image(p, true)?;
    Ok(Stmt::Exec(
        format!(
            "INSERT INTO {} ({}) VALUES {}",
            table_ref(s),
            col_list(s, cols),
            placeholders(s, cols)
        ),
        params_of(s, &a, cols).collect(),
    ))
}

/// Splits one worker's rows into downstream transactions of at most `max` rows; with `atomic`,
/// a split happens only between two commit ts (an upstream transaction larger than `max` stays
/// whole).
fn txn_chunks<'a, 'b>(rows: &'b [&'a Pending], max: usize, atomic: bool) -> Vec<&'b [&'a Pending]> {
    let mut out = Vec::new();
    let mut start = 0;
    while start < rows.len() {
        let mut end = (start + max.max(1)).min(rows.len());
        if atomic {
            while end < rows.len() && rows[end].row.commit_ts == rows[end - 1].row.commit_ts {
                end += 1;
            }
        }
        out.push(&rows[start..end]);
        start = end;
    }
    out
}

/// Feeds a value's identity into a hasher (floats by bit pattern; text and bytes by content).
fn hash_value(v: &Value, h: &mut impl Hasher) {
    std::mem::discriminant(v).hash(h);
    match v {
        Value::Null => {}
        Value::Int(i) => i.hash(h),
        Value::UInt(u) => u.hash(h),
        Value::Float(f) => f.to_bits().hash(h),
        Value::Double(d) => d.to_bits().hash(h),
        Value::Decimal(s) | Value::Text(s) | Value::Json(s) => s.hash(h),
        Value::Bytes(b) | Value::Geometry(b) => b.hash(h),
        Value::Date { year, month, day } => (year, month, day).hash(h),
        Value::Time {
            negative,
            hours,
            minutes,
            seconds,
            micros,
        } => (negative, hours, minutes, seconds, micros).hash(h),
        Value::DateTime {
            year,
            month,
            day,
            hour,
            minute,
            second,
            micros,
        } => (year, month, day, hour, minute, second, micros).hash(h),
        Value::Timestamp { micros } => micros.hash(h),
        Value::Year(y) => y.hash(h),
        Value::Enum { index, .. } => index.hash(h),
        Value::Set { bits, .. } => bits.hash(h),
        Value::Bit { bits, .. } => bits.hash(h),
    }
}

/// Splits rows into per-worker lists so that rows sharing any unique-key value stay on one
/// worker in their original order (union-find over key-value hashes; a hash collision only
/// serializes two unrelated rows, never reorders related ones).
fn partition(rows: &[Pending], workers: usize, atomic: bool) -> Vec<Vec<&Pending>> {
    let n = rows.len();
    let mut parent: Vec<usize> = (0..n).collect();
    fn find(p: &mut [usize], mut x: usize) -> usize {
        while p[x] != x {
            p[x] = p[p[x]];
            x = p[x];
        }
        x
    }
    let mut first_with: HashMap<u64, usize> = HashMap::with_capacity(n * 2);
    for (i, p) in rows.iter().enumerate() {
        let s = &p.schema;
        let keyed = !s.key_columns.is_empty();
        let mut hashes: Vec<u64> = Vec::with_capacity(4);
        if atomic {
            // Every row of one upstream transaction goes to the same worker.
            let mut h = DefaultHasher::new();
            ("txn", p.row.commit_ts).hash(&mut h);
            hashes.push(h.finish());
        }
        if !keyed {
            // Keyless: every row of the table is one chain.
            let mut h = DefaultHasher::new();
            s.table_id.hash(&mut h);
            hashes.push(h.finish());
        } else {
            let keys = std::iter::once(&s.key_columns).chain(s.unique_keys.iter());
            for (ki, key) in keys.enumerate() {
                for img in [&p.row.before, &p.row.after].into_iter().flatten() {
                    if key
                        .iter()
                        .any(|c| matches!(img.get(*c), None | Some(Value::Null)))
                    {
                        continue; // NULLs never conflict in a unique key.
                    }
                    let mut h = DefaultHasher::new();
                    (s.table_id, ki).hash(&mut h);
                    for c in key {
                        if let Some(v) = img.get(*c) {
                            hash_value(v, &mut h);
                        }
                    }
                    hashes.push(h.finish());
                }
            }
        }
        for h in hashes {
            match first_with.get(&h) {
                Some(&j) => {
                    let (a, b) = (find(&mut parent, i), find(&mut parent, j));
                    if a != b {
                        parent[a.max(b)] = a.min(b);
                    }
                }
                None => {
                    first_with.insert(h, i);
                }
            }
        }
    }
    // Components go to workers in contiguous blocks of about n / workers rows, in order of first
    // appearance: rows written in key order then give each worker its own key range, so
    // concurrent workers do not insert into the same index pages (round-robin made every
    // worker contend for the same leaf pages: 4x slower with 16 workers).
    let workers = workers.max(1);
    let roots: Vec<usize> = (0..n).map(|i| find(&mut parent, i)).collect();
    let mut size: HashMap<usize, usize> = HashMap::new();
    for r in &roots {
        *size.entry(*r).or_default() += 1;
    }
    let share = n.div_ceil(workers).max(1);
    let mut out: Vec<Vec<&Pending>> = (0..workers).map(|_| Vec::new()).collect();
    let mut worker_of_root: HashMap<usize, usize> = HashMap::new();
    let (mut w, mut filled) = (0, 0);
    for (i, p) in rows.iter().enumerate() {
        let r = roots[i];
        let wk = *worker_of_root.entry(r).or_insert_with(|| {
            if filled >= share && w + 1 < workers {
                w += 1;
                filled = 0;
            }
            filled += size[&r];
            w
        });
        out[wk].push(p);
    }
    out
}

#[async_trait]
impl Backend for Mysql {
    type Writer = MysqlWriter;

    fn new_writer(&self, spec: &WriterSpec<'_>) -> Result<MysqlWriter> {
        let claim = self
            .cfg
            .downstream_fence
            .then(|| Arc::new(SpanClaim::new(&self.changefeed, spec.dispatcher, spec.span)));
        Ok(MysqlWriter {
            rows: Vec::new(),
            claim,
            in_flight: None,
            open: false,
        })
    }

    async fn buffer(
        &self,
        w: &mut MysqlWriter,
        batch: RowBatch,
        fence: &BoundFence,
    ) -> Result<bool> {
        self.check_table(&batch.schema)?;
        for row in batch.rows {
            w.rows.push(Pending {
                schema: batch.schema.clone(),
                row,
            });
        }
        let held = w.open && self.cfg.table_atomicity;
        if !held
            && w.rows.len()
                >= self.cfg.worker_count * self.cfg.max_txn_row * TXNS_PER_WORKER_PER_FLUSH
        {
            // Apply the full batch in the background while the next one fills; the previous
            // background batch must be done first (order), and its error surfaces here.
            if let Some(h) = w.in_flight.take() {
                join(h).await?;
            }
            let mut rows = std::mem::take(&mut w.rows);
            let me = self.clone();
            let fence = fence.clone();
            let claim = w.claim.clone();
            let apply = async move { me.apply_rows(&mut rows, &fence, claim.as_deref()).await };
            w.in_flight = Some(tokio::spawn(apply));
        }
        Ok(false)
    }

    fn has_buffered(&self, w: &MysqlWriter) -> bool {
        !w.rows.is_empty() || w.in_flight.is_some()
    }

    fn set_open(&self, w: &mut MysqlWriter, open: bool) {
        w.open = open;
    }

    async fn flush(&self, w: &mut MysqlWriter, fence: &BoundFence) -> Result<()> {
        if let Some(h) = w.in_flight.take() {
            join(h).await?;
        }
        if w.open && self.cfg.table_atomicity {
            return Ok(()); // the open transaction's parts wait for its end
        }
        if !w.rows.is_empty() {
            self.apply_rows(&mut w.rows, fence, w.claim.as_deref())
                .await?;
            w.rows.clear();
        }
        Ok(())
    }

    async fn ddl(
        &self,
        _w: &mut MysqlWriter,
        ddl: &DdlEvent,
        _tables: &[Arc<TableSchema>],
        fence: &BoundFence,
    ) -> Result<()> {
        let _serial = self.ddl_lock.lock().await;
        let cf = self.changefeed.clone();
        let ts = ddl.commit_ts;
        let state: Option<i64> = self
            // A read: not fenced (the record that follows is).
            .with_retry("read ddl_ts", &BoundFence::none(), |mut c| {
                let cf = cf.clone();
                async move {
                    c.exec_first(format!("SELECT finished FROM {PROGRESS_DB}.ddl_ts WHERE changefeed = ? AND commit_ts = ?"), (cf, ts)).await
                }
            })
            .await?;
        if state == Some(1) {
            return Ok(());
        }
        let replay = state.is_some();
        let query = if matches!(
            ddl.kind,
            DdlKind::CreateView | DdlKind::DropView | DdlKind::Other
        ) {
            ddl.query.clone()
        } else {
            idempotent_ddl(&ddl.query)
        };
        let db = ddl.database.clone();
        let orig = ddl.query.clone();
        let session = ddl.session.clone().unwrap_or_default();
        let kind = ddl.kind;
        self.with_retry("record ddl_ts", fence, |mut c| {
            let (cf, orig) = (cf.clone(), orig.clone());
            async move {
                c.exec_drop(format!("REPLACE INTO {PROGRESS_DB}.ddl_ts (changefeed, commit_ts, finished, query) VALUES (?, ?, 0, ?)"), (cf, ts, orig)).await
            }
        })
        .await?;
        // A retried DDL is ambiguous like a replayed one (the lost attempt may have taken
        // effect): from the second attempt on, "already done" errors are accepted too.
        let attempted = AtomicBool::new(false);
        let res = self
            .with_retry_within("apply DDL", None, fence, |mut c| {
                let (db, query, session) = (db.clone(), query.clone(), session.clone());
                let retry = attempted.swap(true, Ordering::Relaxed);
                let fence = fence.clone();
                async move {
                    let out =
                        apply_ddl_on(&mut c, &db, &query, &session, kind, retry, &fence).await;
                    // The connection never returns to the pool: MariaDB keeps, per connection,
                    // the defaults of the current database as they were when it became current
                    // (a later `USE` of the same name does not reload them), so a pooled
                    // connection that ran `USE d` would create the tables of a later DDL with
                    // d's defaults from before an `ALTER DATABASE d` that ran elsewhere.
                    let _ = c.disconnect().await;
                    out
                }
            })
            .await;
        match res {
            Ok(()) => {}
            Err(SinkError::Db {
                code: Some(code), ..
            }) if replay && DDL_ALREADY_DONE.contains(&code) => {}
            Err(e) => return Err(e),
        }
        self.with_retry("finish ddl_ts", fence, |mut c| {
            let cf = cf.clone();
            async move { c.exec_drop(format!("UPDATE {PROGRESS_DB}.ddl_ts SET finished = 1 WHERE changefeed = ? AND commit_ts = ?"), (cf, ts)).await }
        })
        .await
    }

    async fn checkpoint(&self, ts: Ts, fence: &BoundFence) -> Result<()> {
        let cf = self.changefeed.clone();
        self.with_retry("write checkpoint", fence, |mut c| {
            let cf = cf.clone();
            async move {
                c.exec_drop(
                    format!("INSERT INTO {PROGRESS_DB}.checkpoint (changefeed, checkpoint_ts) VALUES (?, ?) ON DUPLICATE KEY UPDATE checkpoint_ts = GREATEST(checkpoint_ts, VALUES(checkpoint_ts))"),
                    (cf, ts),
                )
                .await
            }
        })
        .await
    }

    /// The changefeed's `ddl_ts` rows above `after` (recorded before the DDL ran, once every
    /// earlier row of its tables was applied; `finished` once it took effect).
    async fn applied_ddls(&self, after: Ts) -> Result<Vec<crate::DdlRecord>> {
        let cf = self.changefeed.clone();
        let rows: Vec<(u64, i64)> = self
            .with_retry("read ddl_ts", &BoundFence::none(), |mut c| {
                let cf = cf.clone();
                async move {
                    c.exec(
                        format!("SELECT commit_ts, finished FROM {PROGRESS_DB}.ddl_ts WHERE changefeed = ? AND commit_ts > ? ORDER BY commit_ts"),
                        (cf, after),
                    )
                    .await
                }
            })
            .await?;
        Ok(rows
            .into_iter()
            .map(|(commit_ts, finished)| crate::DdlRecord {
                commit_ts,
                finished: finished != 0,
            })
            .collect())
    }

    async fn discard(&self, w: &mut MysqlWriter) {
        if let Some(h) = w.in_flight.take() {
            let _ = h.await;
        }
        w.rows.clear();
    }

    fn flush_interval(&self) -> Option<Duration> {
        Some(MYSQL_FLUSH_INTERVAL)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statements_of_wide_tables_stay_within_the_placeholder_limit() {
        let mut wide = crate::testing::simple_schema("d", "wide", 1, 1);
        let extra = wide.columns[0].clone();
        for k in 0..298 {
            let mut c = extra.clone();
            c.name = format!("c{k}");
            wide.columns.push(c);
        }
        let wide = Arc::new(wide);
        let rows: Vec<Pending> = (0..300u64)
            .map(|i| {
                let mut row = crate::testing::simple_insert(&wide, i, "x", 1, 0);
                if let Some(a) = row.after.as_mut() {
                    a.extend((0..298).map(Value::Int));
                }
                Pending {
                    schema: wide.clone(),
                    row,
                }
            })
            .collect();
        let refs: Vec<&Pending> = rows.iter().collect();
        for (safe, load) in [(false, false), (true, false)] {
            let stmts = build_statements(&refs, safe, 512, load).expect("statements");
            let mut bound = 0;
            for st in &stmts {
                let Stmt::Exec(_, params) = st else {
                    panic!("statements only")
                };
                assert!(
                    params.len() <= MAX_PLACEHOLDERS,
                    "{} placeholders",
                    params.len()
                );
                bound += params.len();
            }
            assert_eq!(bound, 300 * 300, "every value bound once");
            assert!(
                stmts.len() >= 2,
                "300 rows of 300 columns need two statements"
            );
        }
    }

    #[test]
    fn atomic_chunks_never_split_an_upstream_transaction() {
        let schema = Arc::new(crate::testing::simple_schema("d", "t", 1, 1));
        let rows: Vec<Pending> = [1, 1, 1, 2, 3, 3, 3, 3, 4]
            .iter()
            .enumerate()
            .map(|(i, ts)| Pending {
                schema: schema.clone(),
                row: crate::testing::simple_insert(&schema, i as u64, "x", *ts, 0),
            })
            .collect();
        let refs: Vec<&Pending> = rows.iter().collect();
        let sizes = |atomic| {
            txn_chunks(&refs, 2, atomic)
                .iter()
                .map(|c| c.len())
                .collect::<Vec<_>>()
        };
        assert_eq!(sizes(false), vec![2, 2, 2, 2, 1]);
        assert_eq!(sizes(true), vec![3, 5, 1]);
        // With atomicity, one worker gets every row of a transaction even with distinct keys.
        let parts = partition(&rows, 4, true);
        for part in parts.iter().filter(|p| !p.is_empty()) {
            for ts in [1, 3] {
                let here = part.iter().filter(|p| p.row.commit_ts == ts).count();
                assert!(here == 0 || here == rows.iter().filter(|p| p.row.commit_ts == ts).count());
            }
        }
        assert!(
            partition(&rows, 4, false)
                .iter()
                .filter(|p| !p.is_empty())
                .count()
                > 1
        );
    }

    #[test]
    fn ddl_rewrites_are_idempotent_forms() {
        assert_eq!(
            idempotent_ddl("CREATE TABLE t (a int)"),
            "CREATE TABLE IF NOT EXISTS t (a int)"
        );
        assert_eq!(
            idempotent_ddl("create table if not exists t (a int)"),
            "create table if not exists t (a int)"
        );
        assert_eq!(
            idempotent_ddl("DROP TABLE `t` /* generated by server */"),
            "DROP TABLE IF EXISTS `t` /* generated by server */"
        );
        // Inside an ALTER nothing changes: IF NOT EXISTS would be checked against the table
        // before the statement.
        assert_eq!(
            idempotent_ddl("ALTER TABLE t DROP COLUMN a, ADD COLUMN a bigint first"),
            "ALTER TABLE t DROP COLUMN a, ADD COLUMN a bigint first"
        );
        // The text after the insertion is kept as it is (string literals keep their spaces).
        assert_eq!(
            idempotent_ddl("CREATE TABLE t (a varchar(9) DEFAULT 'x  \n y')"),
            "CREATE TABLE IF NOT EXISTS t (a varchar(9) DEFAULT 'x  \n y')"
        );
        assert_eq!(
            idempotent_ddl("DROP TABLE IF EXISTS t"),
            "DROP TABLE IF EXISTS t"
        );
        assert_eq!(
            idempotent_ddl("CREATE DATABASE x"),
            "CREATE DATABASE IF NOT EXISTS x"
        );
    }
}
