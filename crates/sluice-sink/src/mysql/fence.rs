//! The downstream fence of the MySQL sink: no stale write after a pause.
//!
//! The node's write fence ([`crate::fence`]) refuses writes once the lease lapsed, but a check
//! in the process cannot stop bytes already past it: a node frozen between its check and its
//! `COMMIT` would commit when it wakes, behind the rows its successor wrote meanwhile. This fence
//! lives in the downstream, inside the transactions it guards.
//!
//! `sluice_sink.fence` holds one row per (changefeed, table, span) with the dispatcher that
//! holds the span (its id: maintainer epoch and sequence). A dispatcher **claims** its span once,
//! before its first row write ([`SpanClaim::claim`]): under a per-table lock (a row of
//! `sluice_sink.fence_tables`, so claims of one table run one at a time) it deletes every row of
//! an overlapping span and inserts its own, unless an overlapping row belongs to a later
//! dispatcher (then it is the stale one and is refused). Every downstream transaction of rows
//! then starts with [`SpanClaim::begin_checked`]: `START TRANSACTION` and a shared-lock read of
//! its own row, which must still name it, in one round trip.
//!
//! Invariants:
//! - **a stale transaction never commits after a successor's first write**: the successor's
//!   claim deletes the stale row, which needs an exclusive lock, so it waits while a stale
//!   transaction that already passed its check is open (that one commits first, before anything
//!   of the successor) and a stale transaction that checks afterwards finds its row gone and
//!   rolls back ([`crate::SinkError::Superseded`]);
//! - **successors win**: dispatcher ids only grow along a key range (operators remove before they
//!   create; a new maintainer's epoch is greater), so a claim is refused when an overlapping row
//!   names a later dispatcher: a stale dispatcher that never wrote cannot take its range back;
//! - **the dispatchers of one span do not wait on each other**: checks take shared locks, so the
//!   workers of one dispatcher run their transactions in parallel; siblings (other spans of the
//!   table) hold other rows;
//! - **a frozen transaction does not block a successor for ever**: writer sessions set MariaDB's
//!   `idle_transaction_timeout` ([`IDLE_TXN_TIMEOUT`]), so the server ends a transaction that a
//!   paused process left open, and rolls it back (MySQL has no such setting: there the claim
//!   waits until the paused process wakes, finds its lease lapsed and rolls back, or its
//!   connection dies).
//!
//! Left out: DDLs. MariaDB commits before and after each DDL, so no lock can span one; a DDL is
//! checked by the node's fence just before it is sent, and its `ddl_ts` record makes it
//! idempotent on replay.

use crate::error::SinkError;
use crate::mysql::PROGRESS_DB;
use mysql_async::prelude::Queryable;
use mysql_async::{Conn, TxOpts};
use sluice_types::{DispatcherId, Key, Span};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

/// How long a writer session may sit idle inside a transaction before the server ends it (and
/// rolls it back): bounds how long a paused node delays its successor's claim.
pub const IDLE_TXN_TIMEOUT: Duration = Duration::from_secs(15);

/// The session setting that bounds idle transactions, run by every connection of a fenced sink.
/// The variable is MariaDB's (10.3+): it sits in an executable comment that MariaDB runs and
/// MySQL skips, so one statement serves both without a probe (MySQL sets only a user variable).
pub fn idle_timeout_setup() -> String {
    format!(
        "SET @sluice_fence = 1 /*M!100300 , SESSION idle_transaction_timeout = {} */",
        IDLE_TXN_TIMEOUT.as_secs()
    )
}

/// The tables of the fence (created with the other progress tables).
pub fn tables_ddl() -> [String; 2] {
    [
        format!(
            "CREATE TABLE IF NOT EXISTS {PROGRESS_DB}.fence (changefeed VARCHAR(255) NOT NULL, \
             table_id BIGINT UNSIGNED NOT NULL, span_hash BIGINT UNSIGNED NOT NULL, \
             span_start VARBINARY(3072) NOT NULL, span_end VARBINARY(3072) NOT NULL, \
             epoch BIGINT UNSIGNED NOT NULL, seq BIGINT UNSIGNED NOT NULL, \
             PRIMARY KEY (changefeed, table_id, span_hash))"
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS {PROGRESS_DB}.fence_tables (changefeed VARCHAR(255) NOT NULL, \
             table_id BIGINT UNSIGNED NOT NULL, PRIMARY KEY (changefeed, table_id))"
        ),
    ]
}

/// One dispatcher's hold on its span downstream.
#[derive(Debug)]
pub struct SpanClaim {
    changefeed: String,
    id: DispatcherId,
    span: Span,
    hash: u64,
    claimed: AtomicBool,
}

/// A fence row as read back.
type Row = (u64, Vec<u8>, Vec<u8>, u64, u64);

impl SpanClaim {
    pub fn new(changefeed: &str, id: DispatcherId, span: &Span) -> SpanClaim {
        SpanClaim {
            changefeed: changefeed.to_string(),
            id,
            span: span.clone(),
            hash: span_hash(span),
            claimed: AtomicBool::new(false),
        }
    }

    pub fn is_claimed(&self) -> bool {
        self.claimed.load(Ordering::Acquire)
    }

    /// Takes the span over downstream (one transaction on `c`); see the module docs.
    pub async fn claim(&self, mut c: Conn) -> Result<(), mysql_async::Error> {
        let table = self.span.table.0;
        let cf = self.changefeed.as_str();
        let mut tx = c.start_transaction(TxOpts::default()).await?;
        tx.exec_drop(
            format!("INSERT IGNORE INTO {PROGRESS_DB}.fence_tables (changefeed, table_id) VALUES (?, ?)"),
            (cf, table),
        )
        .await?;
        let _: Option<u64> = tx
            .exec_first(
                format!("SELECT table_id FROM {PROGRESS_DB}.fence_tables WHERE changefeed = ? AND table_id = ? FOR UPDATE"),
                (cf, table),
            )
            .await?;
        let rows: Vec<Row> = tx
            .exec(
                format!("SELECT span_hash, span_start, span_end, epoch, seq FROM {PROGRESS_DB}.fence WHERE changefeed = ? AND table_id = ? LOCK IN SHARE MODE"),
                (cf, table),
            )
            .await?;
        for (hash, start, end, epoch, seq) in rows {
            let held = Span::new(self.span.table, Key(start), Key(end));
            if !held.overlaps(&self.span) {
                continue;
            }
            let by = DispatcherId { epoch, seq };
            if by > self.id {
                return Err(self.superseded("claim the span", by));
            }
            // Waits for the transactions that hold this row shared (a stale writer mid-commit).
            tx.exec_drop(
                format!("DELETE FROM {PROGRESS_DB}.fence WHERE changefeed = ? AND table_id = ? AND span_hash = ?"),
                (cf, table, hash),
            )
            .await?;
        }
        tx.exec_drop(
            format!("INSERT INTO {PROGRESS_DB}.fence (changefeed, table_id, span_hash, span_start, span_end, epoch, seq) VALUES (?, ?, ?, ?, ?, ?, ?)"),
            (cf, table, self.hash, self.span.start.0.clone(), self.span.end.0.clone(), self.id.epoch, self.id.seq),
        )
        .await?;
        tx.commit().await?;
        self.claimed.store(true, Ordering::Release);
        Ok(())
    }

    /// Opens a transaction of rows on `c` whose first statement checks that the span's fence
    /// row still names this dispatcher (held shared until the transaction ends), in one round
    /// trip (`START TRANSACTION; SELECT … LOCK IN SHARE MODE`). The driver does not know of a
    /// transaction it did not start, so `c` is marked to be reset when it returns to the pool:
    /// a transaction left open by an error or a dropped future is rolled back by the reset
    /// before the connection is used again. After its `COMMIT`, the caller clears the mark
    /// ([`Conn::reset_connection`]`(false)`).
    pub async fn begin_checked(&self, c: &mut Conn) -> Result<(), mysql_async::Error> {
        c.reset_connection(true);
        let sql = format!(
            "START TRANSACTION; SELECT epoch, seq FROM {PROGRESS_DB}.fence WHERE changefeed = {} AND table_id = {} AND span_hash = {} LOCK IN SHARE MODE",
            mysql_async::Value::from(self.changefeed.as_str()).as_sql(false),
            self.span.table.0,
            self.hash
        );
        let mut result = c.query_iter(sql).await?;
        let mut held: Option<(u64, u64)> = None;
        while !result.is_empty() {
            let rows: Vec<(u64, u64)> = result.collect().await?;
            held = held.or(rows.into_iter().next());
        }
        drop(result);
        match held {
            Some((epoch, seq)) if (DispatcherId { epoch, seq }) == self.id => Ok(()),
            Some((epoch, seq)) => Err(self.superseded("apply rows", DispatcherId { epoch, seq })),
            None => Err(mysql_async::Error::Other(Box::new(SinkError::Superseded {
                what: "apply rows".into(),
                span: format!("{:?}", self.span),
                by: "a later dispatcher (this one's fence row is gone)".into(),
            }))),
        }
    }

    fn superseded(&self, what: &str, by: DispatcherId) -> mysql_async::Error {
        mysql_async::Error::Other(Box::new(SinkError::Superseded {
            what: what.to_string(),
            span: format!("{:?}", self.span),
            by: format!("dispatcher {by:?}"),
        }))
    }
}

/// Where a debug hold stops a downstream transaction of rows (see `MysqlSink::hold_writes`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HoldAt {
    /// After the node's fence check, before anything is sent: the window the node-side check
    /// cannot close, where only the downstream fence refuses the write once it is stale.
    Send,
    /// After the statements and the last node-side check, immediately before `COMMIT`.
    Commit,
}

impl HoldAt {
    pub const ALL: [HoldAt; 2] = [HoldAt::Send, HoldAt::Commit];

    /// The name the debug-holds API knows it by.
    pub fn name(self) -> &'static str {
        match self {
            HoldAt::Send => "mysql_before_send",
            HoldAt::Commit => "mysql_before_commit",
        }
    }

    pub fn from_name(name: &str) -> Option<HoldAt> {
        HoldAt::ALL.into_iter().find(|h| h.name() == name)
    }
}

/// What the MySQL sinks of one node share about their writes: the debug holds of their
/// transactions of rows (off by default, and then one load of a flag per transaction), and how
/// many writes the downstream fence refused as superseded (stale writes that did not land).
#[derive(Debug, Default)]
pub struct WriteHolds {
    send: Gate,
    commit: Gate,
    refused: std::sync::atomic::AtomicU64,
}

impl WriteHolds {
    /// Counts a write the downstream fence refused.
    pub fn count_refused(&self) {
        self.refused.fetch_add(1, Ordering::Relaxed);
    }

    /// Writes the downstream fence refused so far.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    fn gate(&self, at: HoldAt) -> &Gate {
        match at {
            HoldAt::Send => &self.send,
            HoldAt::Commit => &self.commit,
        }
    }

    pub fn set(&self, at: HoldAt, on: bool) {
        self.gate(at).on.send_replace(on);
    }

    pub fn is_on(&self, at: HoldAt) -> bool {
        *self.gate(at).on.borrow()
    }

    /// Transactions waiting at `at` now.
    pub fn waiting(&self, at: HoldAt) -> usize {
        self.gate(at).waiting.load(Ordering::Acquire)
    }

    /// Returns once the hold at `at` is off.
    pub async fn wait(&self, at: HoldAt) {
        let gate = self.gate(at);
        let mut rx = gate.on.subscribe();
        if !*rx.borrow_and_update() {
            return;
        }
        gate.waiting.fetch_add(1, Ordering::AcqRel);
        // Counted out also when the wait is dropped (the call's read timeout).
        let _out = Waiting(&gate.waiting);
        let _ = rx.wait_for(|on| !*on).await;
    }
}

#[derive(Debug)]
struct Gate {
    on: tokio::sync::watch::Sender<bool>,
    waiting: AtomicUsize,
}

impl Default for Gate {
    fn default() -> Self {
        Gate {
            on: tokio::sync::watch::channel(false).0,
            waiting: AtomicUsize::new(0),
        }
    }
}

struct Waiting<'a>(&'a AtomicUsize);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A stable 64-bit hash of a span's bounds (FNV-1a; the row key of its fence row).
fn span_hash(span: &Span) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |b: u8| {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    };
    for b in (span.start.0.len() as u64).to_be_bytes() {
        eat(b);
    }
    span.start.0.iter().copied().for_each(&mut eat);
    span.end.0.iter().copied().for_each(&mut eat);
    h
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_types::TableId;

    #[test]
    fn span_hashes_tell_bounds_apart() {
        let t = TableId(7);
        let whole = Span::whole_table(t);
        let mid = Key::row_u64(t, 100);
        let left = Span::new(t, whole.start.clone(), mid.clone());
        let right = Span::new(t, mid, whole.end.clone());
        let hashes = [span_hash(&whole), span_hash(&left), span_hash(&right)];
        assert_ne!(hashes[0], hashes[1]);
        assert_ne!(hashes[0], hashes[2]);
        assert_ne!(hashes[1], hashes[2]);
        assert_eq!(span_hash(&whole), span_hash(&Span::whole_table(t)));
    }
}
