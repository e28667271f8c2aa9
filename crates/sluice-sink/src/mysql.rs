//! The MySQL-compatible sink (`mysql://user:pass@host:port/?worker-count=…&max-txn-row=…&safe-mode=…`).
//!
//! Invariants:
//! - rows are applied in the order written for any two rows that share a value of any unique key
//!   (primary or not, before or after image): a flush partitions its rows into components linked
//!   by shared key values, each component runs in order on one worker; flushes of one dispatcher
//!   never overlap;
//! - each worker applies its part of a flush in downstream transactions of at most `max-txn-row`
//!   rows, as multi-row statements (`REPLACE`/`INSERT … VALUES (…),(…)`, `DELETE … WHERE key IN`);
//! - in safe mode (default) inserts and updates are `REPLACE`, deletes are by key, so applying a
//!   prefix of the stream again (a replay from the checkpoint) ends in the upstream state;
//! - a table with no primary or not-null unique key is refused ([`SinkError::TableRefused`])
//!   unless `force-replicate=true`; such tables are written without `REPLACE` (rows may duplicate
//!   on replay: documented in docs/sinks.md);
//! - DDLs run in commit order, one at a time, recorded in `sluice_sink.ddl_ts` (changefeed,
//!   commit ts, finished): a finished DDL is skipped on replay; an unfinished one (crash between the
//!   DDL and its record: MariaDB DDL cannot share a transaction) runs again in an idempotent form
//!   (`IF [NOT] EXISTS`) and "already done" errors are then accepted;
//! - retryable errors are retried with doubling backoff up to `max-retries`; fatal ones (unknown
//!   column or table, bad data) surface at once with the server's message.

use crate::error::{Result, SinkError};
use crate::runner::{Backend, Runner};
use crate::uri::MysqlConfig;
use crate::RowBatch;
use async_trait::async_trait;
use mysql_async::prelude::Queryable;
use mysql_async::{Conn, OptsBuilder, Pool, PoolConstraints, PoolOpts, TxOpts};
use sluice_types::{
    DdlEvent, DdlKind, DispatcherId, RowEvent, RowKind, Span, TableSchema, Ts, Value,
};
use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::Duration;

/// The downstream schema holding Sluice's progress tables.
pub const PROGRESS_DB: &str = "sluice_sink";
/// How often buffered rows are flushed without being asked.
pub const MYSQL_FLUSH_INTERVAL: Duration = Duration::from_millis(200);
/// A dispatcher buffers up to `worker-count * max-txn-row * TXNS_PER_WORKER_PER_FLUSH` rows before
/// it flushes (so each worker gets several transactions per flush, fewer flush barriers).
pub const TXNS_PER_WORKER_PER_FLUSH: usize = 8;
/// Upper bound of one retry backoff step.
pub const MAX_BACKOFF: Duration = Duration::from_secs(10);
/// Server errors meaning "this DDL already took effect", accepted when replaying an unfinished DDL.
pub const DDL_ALREADY_DONE: &[u16] = &[1007, 1008, 1050, 1051, 1060, 1061, 1091, 1146, 1054, 1176];

/// Quotes an identifier with backticks.
pub fn quote_ident(s: &str) -> String {
    format!("`{}`", s.replace('`', "``"))
}

/// A connection pool for a MySQL config (session in UTC, foreign key checks off).
pub fn pool(cfg: &MysqlConfig, max_conns: usize) -> Result<Pool> {
    let constraints = PoolConstraints::new(0, max_conns.max(1))
        .ok_or_else(|| SinkError::invalid_uri(&cfg.host, "bad pool size"))?;
    let opts = OptsBuilder::default()
        .ip_or_hostname(cfg.host.clone())
        .tcp_port(cfg.port)
        .user(Some(cfg.user.clone()))
        .pass(Some(cfg.password.expose().to_string()))
        .prefer_socket(false)
        .init(vec![
            "SET time_zone = '+00:00'",
            "SET foreign_key_checks = 0",
        ])
        .pool_opts(PoolOpts::default().with_constraints(constraints));
    Ok(Pool::new(opts))
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

/// Rewrites a DDL into its idempotent form where MariaDB has one.
pub fn idempotent_ddl(query: &str) -> String {
    let toks: Vec<&str> = query.split_whitespace().collect();
    let up: Vec<String> = toks.iter().map(|t| t.to_ascii_uppercase()).collect();
    let mut out: Vec<String> = Vec::with_capacity(toks.len() + 4);
    let next_is_if = |i: usize| up.get(i + 1).is_some_and(|t| t == "IF");
    let mut i = 0;
    while i < toks.len() {
        out.push(toks[i].to_string());
        let prev = if i > 0 { up[i - 1].as_str() } else { "" };
        let cur = up[i].as_str();
        let insert = match (prev, cur) {
            ("CREATE", "TABLE")
            | ("CREATE", "DATABASE")
            | ("CREATE", "SCHEMA")
            | ("ADD", "COLUMN")
            | ("ADD", "INDEX")
            | ("ADD", "KEY") => Some("IF NOT EXISTS"),
            ("DROP", "TABLE")
            | ("DROP", "DATABASE")
            | ("DROP", "SCHEMA")
            | ("DROP", "COLUMN")
            | ("DROP", "INDEX")
            | ("DROP", "KEY")
            | ("DROP", "VIEW") => Some("IF EXISTS"),
            _ => None,
        };
        if let Some(s) = insert {
            if !next_is_if(i) {
                out.push(s.to_string());
            }
        }
        i += 1;
    }
    out.join(" ")
}

struct Pending {
    schema: Arc<TableSchema>,
    row: RowEvent,
}

pub struct MysqlWriter {
    rows: Vec<Pending>,
    /// The previous full batch, being applied while this one fills (at most one).
    in_flight: Option<tokio::task::JoinHandle<Result<()>>>,
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
        let pool = pool(&cfg, cfg.worker_count + 2)?;
        let m = Mysql {
            cfg,
            pool,
            changefeed: changefeed.to_string(),
            ddl_lock: Arc::new(tokio::sync::Mutex::new(())),
        };
        m.with_retry("create progress tables", |mut c| async move {
            c.query_drop(format!("CREATE DATABASE IF NOT EXISTS {PROGRESS_DB}")).await?;
            c.query_drop(format!(
                "CREATE TABLE IF NOT EXISTS {PROGRESS_DB}.ddl_ts (changefeed VARCHAR(255) NOT NULL, commit_ts BIGINT UNSIGNED NOT NULL, \
                 finished TINYINT NOT NULL, query LONGTEXT, PRIMARY KEY (changefeed, commit_ts))"
            ))
            .await?;
            c.query_drop(format!(
                "CREATE TABLE IF NOT EXISTS {PROGRESS_DB}.checkpoint (changefeed VARCHAR(255) NOT NULL PRIMARY KEY, checkpoint_ts BIGINT UNSIGNED NOT NULL)"
            ))
            .await
        })
        .await?;
        Ok(Runner::with_backend(m))
    }

    pub fn pool(&self) -> Pool {
        self.backend().pool.clone()
    }
}

impl Mysql {
    /// Applies rows (one flush's worth) with every worker, in causality order.
    async fn apply_rows(&self, rows: &[Pending]) -> Result<()> {
        let atomic = self.cfg.table_atomicity;
        let parts = partition(rows, self.cfg.worker_count, atomic);
        let mut jobs = Vec::new();
        for part in parts.into_iter().filter(|p| !p.is_empty()) {
            // One downstream transaction per max-txn-row rows of this worker (never splitting an
            // upstream transaction with transaction-atomicity=table).
            let mut txns = Vec::new();
            for chunk in txn_chunks(&part, self.cfg.max_txn_row, atomic) {
                txns.push(build_statements(
                    chunk,
                    self.cfg.safe_mode,
                    self.cfg.max_txn_row,
                )?);
            }
            jobs.push(async move {
                for stmts in txns {
                    let stmts = Arc::new(stmts);
                    self.with_retry("apply rows", |mut c| {
                        let stmts = stmts.clone();
                        async move {
                            let mut tx = c.start_transaction(TxOpts::default()).await?;
                            for (sql, params) in stmts.iter() {
                                tx.exec_drop(sql.as_str(), params.clone()).await?;
                            }
                            tx.commit().await
                        }
                    })
                    .await?;
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

    /// Runs `f` on a fresh pooled connection, retrying retryable errors with backoff.
    async fn with_retry<F, Fut, T>(&self, what: &str, f: F) -> Result<T>
    where
        F: Fn(Conn) -> Fut,
        Fut: std::future::Future<Output = std::result::Result<T, mysql_async::Error>>,
    {
        let mut backoff = self.cfg.retry_backoff;
        let mut attempt = 0;
        loop {
            let res = match self.pool.get_conn().await {
                Ok(c) => f(c).await,
                Err(e) => Err(e),
            };
            match res {
                Ok(v) => return Ok(v),
                Err(e) => {
                    let err = SinkError::db(what, e);
                    if !err.is_retryable() || attempt >= self.cfg.max_retries {
                        return Err(err);
                    }
                    attempt += 1;
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
            }
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

/// One statement and its parameters.
type Stmt = (String, Vec<mysql_async::Value>);

fn table_ref(s: &TableSchema) -> String {
    format!("{}.{}", quote_ident(&s.database), quote_ident(&s.name))
}

fn col_list(s: &TableSchema) -> String {
    s.columns
        .iter()
        .map(|c| quote_ident(&c.name))
        .collect::<Vec<_>>()
        .join(",")
}

fn placeholders(n: usize) -> String {
    format!("({})", vec!["?"; n].join(","))
}

/// The statements applying `rows` (one worker's share, in order).
fn build_statements(rows: &[&Pending], safe_mode: bool, max_rows: usize) -> Result<Vec<Stmt>> {
    #[derive(PartialEq)]
    enum Class {
        Upsert,
        Insert,
        Delete,
        Single,
    }
    let class = |p: &Pending| {
        let keyed = !p.schema.key_columns.is_empty();
        match p.row.kind {
            RowKind::Insert if safe_mode && keyed => Class::Upsert,
            RowKind::Update if safe_mode && keyed => Class::Upsert,
            RowKind::Insert => Class::Insert,
            RowKind::Delete if keyed => Class::Delete,
            _ => Class::Single,
        }
    };
    let image = |p: &Pending, after: bool| -> Result<Vec<Value>> {
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
    };
    let mut out = Vec::new();
    let mut i = 0;
    while i < rows.len() {
        let first = rows[i];
        let c = class(first);
        let mut j = i + 1;
        if c != Class::Single {
            while j < rows.len()
                && j - i < max_rows
                && class(rows[j]) == c
                && Arc::ptr_eq(&rows[j].schema, &first.schema)
            {
                j += 1;
            }
        }
        let s = &first.schema;
        match c {
            Class::Upsert | Class::Insert => {
                let verb = if c == Class::Upsert {
                    "REPLACE"
                } else {
                    "INSERT"
                };
                let mut params = Vec::new();
                for p in &rows[i..j] {
                    params.extend(image(p, true)?.iter().map(to_param));
                }
                let vals = vec![placeholders(s.columns.len()); j - i].join(",");
                out.push((
                    format!(
                        "{verb} INTO {} ({}) VALUES {vals}",
                        table_ref(s),
                        col_list(s)
                    ),
                    params,
                ));
            }
            Class::Delete => {
                let keys: Vec<String> = s
                    .key_columns
                    .iter()
                    .map(|k| quote_ident(&s.columns[*k].name))
                    .collect();
                let mut params = Vec::new();
                for p in &rows[i..j] {
                    let b = image(p, false)?;
                    params.extend(s.key_columns.iter().map(|k| to_param(&b[*k])));
                }
                let tuple = placeholders(keys.len());
                let sql = format!(
                    "DELETE FROM {} WHERE ({}) IN ({})",
                    table_ref(s),
                    keys.join(","),
                    vec![tuple; j - i].join(",")
                );
                out.push((sql, params));
            }
            Class::Single => {
                // Updates outside safe mode, and keyless tables: one statement per row.
                let keyed = !s.key_columns.is_empty();
                let where_cols: Vec<usize> = if keyed {
                    s.key_columns.clone()
                } else {
                    (0..s.columns.len()).collect()
                };
                let cond = where_cols
                    .iter()
                    .map(|k| format!("{} <=> ?", quote_ident(&s.columns[*k].name)))
                    .collect::<Vec<_>>()
                    .join(" AND ");
                let limit = if keyed { "" } else { " LIMIT 1" };
                match first.row.kind {
                    RowKind::Update => {
                        let (b, a) = (image(first, false)?, image(first, true)?);
                        let set = s
                            .columns
                            .iter()
                            .map(|c| format!("{} = ?", quote_ident(&c.name)))
                            .collect::<Vec<_>>()
                            .join(",");
                        let mut params: Vec<_> = a.iter().map(to_param).collect();
                        params.extend(where_cols.iter().map(|k| to_param(&b[*k])));
                        out.push((
                            format!("UPDATE {} SET {set} WHERE {cond}{limit}", table_ref(s)),
                            params,
                        ));
                    }
                    RowKind::Delete => {
                        let b = image(first, false)?;
                        let params = where_cols.iter().map(|k| to_param(&b[*k])).collect();
                        out.push((
                            format!("DELETE FROM {} WHERE {cond}{limit}", table_ref(s)),
                            params,
                        ));
                    }
                    RowKind::Insert => {
                        let a = image(first, true)?;
                        out.push((
                            format!(
                                "INSERT INTO {} ({}) VALUES {}",
                                table_ref(s),
                                col_list(s),
                                placeholders(s.columns.len())
                            ),
                            a.iter().map(to_param).collect(),
                        ));
                    }
                }
            }
        }
        i = j;
    }
    Ok(out)
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
    let mut out: Vec<Vec<&Pending>> = (0..workers.max(1)).map(|_| Vec::new()).collect();
    let mut worker_of_root: HashMap<usize, usize> = HashMap::new();
    let mut next = 0;
    for (i, p) in rows.iter().enumerate() {
        let r = find(&mut parent, i);
        let w = *worker_of_root.entry(r).or_insert_with(|| {
            let w = next % out.len();
            next += 1;
            w
        });
        out[w].push(p);
    }
    out
}

#[async_trait]
impl Backend for Mysql {
    type Writer = MysqlWriter;

    fn new_writer(&self, _: DispatcherId, _: &Span) -> Result<MysqlWriter> {
        Ok(MysqlWriter {
            rows: Vec::new(),
            in_flight: None,
        })
    }

    async fn buffer(&self, w: &mut MysqlWriter, batch: RowBatch) -> Result<bool> {
        self.check_table(&batch.schema)?;
        for row in batch.rows {
            w.rows.push(Pending {
                schema: batch.schema.clone(),
                row,
            });
        }
        if w.rows.len() >= self.cfg.worker_count * self.cfg.max_txn_row * TXNS_PER_WORKER_PER_FLUSH
        {
            // Apply the full batch in the background while the next one fills; the previous
            // background batch must be done first (order), and its error surfaces here.
            if let Some(h) = w.in_flight.take() {
                join(h).await?;
            }
            let rows = std::mem::take(&mut w.rows);
            let me = self.clone();
            w.in_flight = Some(tokio::spawn(async move { me.apply_rows(&rows).await }));
        }
        Ok(false)
    }

    fn has_buffered(&self, w: &MysqlWriter) -> bool {
        !w.rows.is_empty() || w.in_flight.is_some()
    }

    async fn flush(&self, w: &mut MysqlWriter) -> Result<()> {
        if let Some(h) = w.in_flight.take() {
            join(h).await?;
        }
        if !w.rows.is_empty() {
            self.apply_rows(&w.rows).await?;
            w.rows.clear();
        }
        Ok(())
    }

    async fn ddl(
        &self,
        _w: &mut MysqlWriter,
        ddl: &DdlEvent,
        _tables: &[Arc<TableSchema>],
    ) -> Result<()> {
        let _serial = self.ddl_lock.lock().await;
        let cf = self.changefeed.clone();
        let ts = ddl.commit_ts;
        let state: Option<i64> = self
            .with_retry("read ddl_ts", |mut c| {
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
        self.with_retry("record ddl_ts", |mut c| {
            let (cf, orig) = (cf.clone(), orig.clone());
            async move {
                c.exec_drop(format!("REPLACE INTO {PROGRESS_DB}.ddl_ts (changefeed, commit_ts, finished, query) VALUES (?, ?, 0, ?)"), (cf, ts, orig)).await
            }
        })
        .await?;
        let res = self
            .with_retry("apply DDL", |mut c| {
                let (db, query) = (db.clone(), query.clone());
                async move {
                    if !db.is_empty() {
                        if let Err(e) = c.query_drop(format!("USE {}", quote_ident(&db))).await {
                            match &e {
                                mysql_async::Error::Server(s) if s.code == 1049 => {}
                                _ => return Err(e),
                            }
                        }
                    }
                    c.query_drop(query.as_str()).await
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
        self.with_retry("finish ddl_ts", |mut c| {
            let cf = cf.clone();
            async move { c.exec_drop(format!("UPDATE {PROGRESS_DB}.ddl_ts SET finished = 1 WHERE changefeed = ? AND commit_ts = ?"), (cf, ts)).await }
        })
        .await
    }

    async fn checkpoint(&self, ts: Ts) -> Result<()> {
        let cf = self.changefeed.clone();
        self.with_retry("write checkpoint", |mut c| {
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
        assert_eq!(
            idempotent_ddl("ALTER TABLE t ADD COLUMN c int, DROP COLUMN d"),
            "ALTER TABLE t ADD COLUMN IF NOT EXISTS c int, DROP COLUMN IF EXISTS d"
        );
        assert_eq!(
            idempotent_ddl("CREATE DATABASE x"),
            "CREATE DATABASE IF NOT EXISTS x"
        );
    }
}
