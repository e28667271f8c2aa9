//! Glue between the binlog reader and the rest of Sluice: turns a [`Transaction`] into Sluice
//! events — [`RowEvent`]s with table ids and keys from the [`SchemaHistory`], or a
//! [`DdlEvent`] — and advances the history with every DDL.
//!
//! Invariants:
//! - a row's table id is the id of its `db.table` in the history at the row's commit ts;
//! - a row's key is [`crate::keys::row_key`] over the history's key columns (primary key or a
//!   not-null unique key), with the collations from the TABLE_MAP; a table without such a key
//!   gets the empty key (one unsplittable span);
//! - an update that changes the key becomes a delete of the old key and an insert of the new
//!   key, both with the transaction's commit ts;
//! - rows of system schemas (`mysql`, ...) and sequences are dropped; rows of a table unknown to
//!   the history are set aside as an unreplicable change that stops the tables (never silently
//!   dropped, never fatal for capture), in early chunks of a large transaction too;
//! - the staged rows of a large transaction are numbered `0..n` in the order staged, and its
//!   commit names exactly the `n` rows staged (rows dropped from a chunk are not counted).

use crate::binlog::{BinlogReader, ReaderEvent, RowChange, Transaction, TxnChunk};
use crate::error::{CaptureError, Result};
use crate::keys::row_key;
use crate::pos::BinlogPos;
use crate::schema::{is_system_schema, SchemaHistory, SchemaStore};
use crate::store::EventStore;
use sluice_types::{
    ColumnType, DdlEvent, DdlInfluence, DdlKind, InfluenceScope, Key, RowEvent, RowKind, TableId,
    TableSchema, Ts, Value,
};
use std::sync::Arc;

/// What one transaction becomes.
#[derive(Clone, Debug, PartialEq)]
pub enum Captured {
    /// The row changes of one transaction (possibly empty: e.g. only system tables).
    Rows {
        commit_ts: Ts,
        rows: Vec<RowEvent>,
    },
    Ddl(DdlEvent),
    /// Everything with commit ts `<= ts` has been captured.
    Resolved(Ts),
    /// Early rows of a large transaction, to be staged until its commit (their `commit_ts` is 0).
    Chunk {
        start: BinlogPos,
        first_seq: usize,
        rows: Vec<RowEvent>,
    },
    /// The commit of a transaction whose first `staged_rows` rows came as [`Captured::Chunk`]s
    /// (all with this `start`); `rows` are the rest.
    CommitStaged {
        commit_ts: Ts,
        /// The commit time the staged rows take (they were staged before it was known).
        commit_time_ms: u64,
        start: BinlogPos,
        staged_rows: usize,
        rows: Vec<RowEvent>,
    },
    /// Discard the chunks staged for the transaction starting here (it will be read again).
    Abort(BinlogPos),
}

use crate::binlog_schema::agrees;

fn key_spec(schema: &TableSchema, change: &RowChange) -> Vec<(usize, u16)> {
    let cols = &change.table.columns;
    let idx: Vec<usize> = if !schema.key_columns.is_empty() && agrees(schema, &change.table) {
        schema.key_columns.clone()
    } else {
        change.table.primary_key.clone()
    };
    idx.into_iter()
        .filter(|i| *i < cols.len())
        .map(|i| (i, cols[i].collation))
        .collect()
}

/// The event that stops the tables of a transaction's unreplicable changes (see
/// [`crate::unreplicable`]), before everything else of the transaction; `None` when they touch
/// no table Sluice captures.
fn unreplicable_marker(history: &SchemaHistory, txn: &Transaction) -> Option<DdlEvent> {
    if txn.unreplicable.is_empty() {
        return None;
    }
    // Before the transaction's DDL (`commit_ts - 1` when it has rows) and its rows.
    let ts = if txn.statement.is_some() {
        txn.commit_ts - 2
    } else if txn.rows.is_empty() && txn.chunked_rows == 0 {
        txn.commit_ts
    } else {
        txn.commit_ts - 1
    };
    let mut ids = Vec::new();
    let mut every = false;
    let mut reasons = Vec::new();
    for u in &txn.unreplicable {
        let tracked: Vec<(String, TableId)> = u
            .tables
            .iter()
            .filter(|(db, t)| is_captured(history, db, t))
            .filter_map(|(db, t)| {
                history
                    .table_at(db, t, ts)
                    .map(|s| (format!("{db}.{t}"), s.table_id))
            })
            .collect();
        if u.tables.is_empty() {
            every = true;
            reasons.push(format!("tables unknown: {}", u.reason));
        } else if !tracked.is_empty() {
            let names: Vec<&str> = tracked.iter().map(|(n, _)| n.as_str()).collect();
            reasons.push(format!("table {}: {}", names.join(", "), u.reason));
            ids.extend(tracked.into_iter().map(|(_, id)| id));
        }
    }
    if ids.is_empty() && !every {
        return None;
    }
    ids.sort();
    ids.dedup();
    Some(DdlEvent {
        session: Default::default(),
        object_database: None,
        commit_ts: ts,
        commit_time_ms: txn.commit_time_ms,
        kind: DdlKind::Unreplicable,
        database: String::new(),
        query: reasons.join("; "),
        influence: DdlInfluence::scoped(
            if every {
                InfluenceScope::All
            } else {
                InfluenceScope::Tables(ids)
            },
            false,
        ),
    })
}

/// Removes from `rows` those of tables the history does not know at `at` (except the one
/// `creates` names) and adds their `db.table` names to `names` (each once).
fn take_unknown_rows(
    history: &SchemaHistory,
    at: Ts,
    creates: impl Fn(&str, &str) -> bool,
    rows: &mut Vec<RowChange>,
    names: &mut Vec<String>,
) {
    let unknown = |c: &RowChange| {
        let (db, t) = (&c.table.database, &c.table.table);
        is_captured(history, db, t) && history.table_at(db, t, at).is_none() && !creates(db, t)
    };
    for c in rows.iter().filter(|c| unknown(c)) {
        let n = format!("{}.{}", c.table.database, c.table.table);
        if !names.contains(&n) {
            names.push(n);
        }
    }
    rows.retain(|c| !unknown(c));
}

/// Rows of a table the history does not know (it missed the table's creation) cannot be
/// routed to any dispatcher: they are set aside as unreplicable, and since no dispatcher of
/// that table exists, every table stops at them (loudly), rather than capture stopping or the
/// rows vanishing. A DDL of the same transaction (CREATE TABLE … SELECT) is applied first.
/// `names` already holds the unknown tables of the transaction's early chunks.
fn set_aside_unknown_tables(
    history: &SchemaHistory,
    txn: &mut Transaction,
    mut names: Vec<String>,
) {
    let after_ddl = if txn.statement.is_some() {
        txn.commit_ts
    } else {
        txn.commit_ts - 1
    };
    let stmt = txn.statement.clone();
    let creates = |db: &str, t: &str| txn_creates(stmt.as_ref(), db, t);
    take_unknown_rows(history, after_ddl, creates, &mut txn.rows, &mut names);
    if names.is_empty() {
        return;
    }
    txn.unreplicable.push(crate::unreplicable::Unreplicable {
        tables: Vec::new(),
        reason: format!(
            "rows of {} reached the binlog, but the schema history does not know the table (its \
             creation was missed), so no dispatcher serves it: re-create the changefeed from a \
             position after the table exists, or let the tables go on and re-copy it",
            names.join(", ")
        ),
    });
}

/// Child rows InnoDB changed through foreign-key cascades of this transaction's DELETEs and
/// UPDATEs are not in the binlog: each child table's change is unreplicable, once per
/// transaction ([`crate::foreign_keys`]). Keys are read before the transaction's own DDL.
fn note_cascades(history: &SchemaHistory, txn: &mut Transaction) {
    if txn.parent_changes.is_empty() || history.foreign_keys.tables.is_empty() {
        return;
    }
    let before = txn.commit_ts.saturating_sub(2);
    for u in crate::foreign_keys::cascades(history, before, &txn.parent_changes) {
        if txn.unreplicable.len() >= crate::unreplicable::MAX_PER_TRANSACTION {
            break;
        }
        if !txn.unreplicable.iter().any(|x| x.tables == u.tables) {
            txn.unreplicable.push(u);
        }
    }
}

/// Whether the transaction's own statement creates `db.t` (its rows are then known once it is
/// applied).
fn txn_creates(stmt: Option<&crate::binlog::Statement>, db: &str, t: &str) -> bool {
    stmt.is_some_and(|s| {
        matches!(
            crate::binlog_schema::create_target(&s.query, &s.database),
            Some((d, n)) if d == db && n == t
        )
    })
}

/// What capture staged of the open large transaction: the rows it handed out as
/// [`Captured::Chunk`]s and the unknown tables whose rows it set aside from them.
#[derive(Debug, Default)]
pub struct Staging {
    pub rows: usize,
    pub unknown: Vec<String>,
}

/// Converts one transaction, applying its DDL (if any) to `history`.
pub fn convert(history: &mut SchemaHistory, txn: Transaction) -> Result<Vec<Captured>> {
    convert_staged(history, txn, Staging::default())
}

/// [`convert`] of a transaction whose early rows came as chunks, staged as `staging` says.
pub fn convert_staged(
    history: &mut SchemaHistory,
    mut txn: Transaction,
    staging: Staging,
) -> Result<Vec<Captured>> {
    let mut out = Vec::with_capacity(1);
    set_aside_unknown_tables(history, &mut txn, staging.unknown);
    note_cascades(history, &mut txn);
    if let Some(marker) = unreplicable_marker(history, &txn) {
        out.push(Captured::Ddl(marker));
    }
    if let Some(stmt) = &txn.statement {
        // A DDL with rows in the same transaction (CREATE TABLE ... SELECT) gets the commit ts
        // `commit_ts - 1` (never the end of another transaction) so its rows, at `commit_ts`,
        // come strictly after it.
        let ddl_ts = if txn.rows.is_empty() {
            txn.commit_ts
        } else {
            txn.commit_ts - 1
        };
        match history.apply_in_session(
            ddl_ts,
            txn.commit_time_ms,
            &stmt.database,
            &stmt.query,
            &stmt.session,
        )? {
            Some(ddl) => out.push(Captured::Ddl(ddl)),
            None if txn.rows.is_empty() => out.push(Captured::Rows {
                commit_ts: txn.commit_ts,
                rows: Vec::new(),
            }),
            None => {}
        }
        if txn.rows.is_empty() {
            return Ok(out);
        }
    }
    let (ts, ms) = (txn.commit_ts, txn.commit_time_ms);
    let rows = convert_rows(history, ts, (ts, ms, txn.gtid), txn.rows)?;
    if txn.chunked_rows > 0 {
        out.push(Captured::CommitStaged {
            commit_ts: ts,
            commit_time_ms: ms,
            start: txn.start,
            staged_rows: staging.rows,
            rows,
        });
    } else {
        out.push(Captured::Rows {
            commit_ts: ts,
            rows,
        });
    }
    Ok(out)
}

/// Converts an early chunk of a large transaction (rows carry commit ts 0 until the commit);
/// `staging` counts what is staged and collects the unknown tables set aside.
pub fn convert_chunk(
    history: &mut SchemaHistory,
    staging: &mut Staging,
    mut chunk: TxnChunk,
) -> Result<Captured> {
    // No DDL lies between the transaction's start and its commit, so the schema at its start
    // is the schema at its commit.
    let at = chunk.start.ts().unwrap_or(history.head);
    let none = |_: &str, _: &str| false;
    take_unknown_rows(history, at, none, &mut chunk.rows, &mut staging.unknown);
    let rows = convert_rows(history, at, (0, 0, chunk.gtid), chunk.rows)?;
    let first_seq = staging.rows;
    staging.rows += rows.len();
    Ok(Captured::Chunk {
        start: chunk.start,
        first_seq,
        rows,
    })
}

/// How a table's rows are keyed and which of their values are read differently from how the
/// binlog logs them, resolved once per TABLE_MAP of a transaction.
struct Resolved {
    meta: Arc<crate::decode::TableMeta>,
    id: sluice_types::TableId,
    version: Ts,
    spec: Vec<(usize, u16)>,
    fixes: Vec<(usize, ValueFix)>,
    /// A system-versioned table's implicit `row_end` column.
    row_end: Option<usize>,
}

/// A column whose binlog value is not the value users know.
#[derive(Clone, Copy)]
enum ValueFix {
    /// MariaDB logs JSON as LONGTEXT: the history knows which columns are JSON.
    Json,
    /// UUID / INET4 / INET6, logged as their stored bytes.
    Text(crate::textual::TextForm),
}

impl ValueFix {
    fn of(c: &sluice_types::ColumnDef) -> Option<ValueFix> {
        if c.ty == ColumnType::Json {
            return Some(ValueFix::Json);
        }
        crate::textual::TextForm::of(&c.sql_type).map(ValueFix::Text)
    }

    fn apply(self, v: &mut Value) {
        match self {
            ValueFix::Json => {
                if let Value::Text(t) = v {
                    *v = Value::Json(std::mem::take(t));
                }
            }
            ValueFix::Text(form) => form.apply(v),
        }
    }
}

impl Resolved {
    /// The column-level reading applies only where the history names the binlog's columns
    /// (otherwise, with `skip_unparseable_ddl`, the TABLE_MAP's primary key keys the rows).
    fn new(schema: &TableSchema, change: &RowChange) -> Resolved {
        let agree = agrees(schema, &change.table);
        let fixes = if agree {
            let cols = schema.columns.iter().enumerate();
            cols.filter_map(|(i, c)| ValueFix::of(c).map(|f| (i, f)))
                .collect()
        } else {
            Vec::new()
        };
        Resolved {
            meta: change.table.clone(),
            id: schema.table_id,
            version: schema.version,
            spec: key_spec(schema, change),
            fixes,
            row_end: period_end(schema).filter(|_| agree),
        }
    }
}

/// A row's table as the history has it at `lookup_ts` (settled from the binlog's TABLE_MAP);
/// `None` for a table that is not captured. A history that disagrees with the binlog about the
/// table is an error (keying rows by the wrong columns would corrupt routing silently), unless
/// `skip_unparseable_ddl` (the TABLE_MAP's primary key is used then).
fn resolve_table(
    history: &mut SchemaHistory,
    lookup_ts: Ts,
    change: &RowChange,
) -> Result<Option<Resolved>> {
    let (db, name) = (&change.table.database, &change.table.table);
    if !is_captured(history, db, name) {
        return Ok(None);
    }
    history.settle_from_binlog(lookup_ts, &change.table);
    let schema = history
        .table_at(db, name, lookup_ts)
        .ok_or_else(|| CaptureError::UnknownTable(format!("{db}.{name}"), lookup_ts))?;
    if !agrees(schema, &change.table) && !history.skip_unparseable_ddl {
        return Err(CaptureError::Decode {
            file: String::new(),
            pos: lookup_ts,
            message: format!(
                "schema history disagrees with the binlog about {db}.{name}: history columns {:?}, \
                 binlog columns {:?}",
                schema.columns.iter().map(|c| &c.name).collect::<Vec<_>>(),
                change.table.columns.iter().map(|c| &c.name).collect::<Vec<_>>()
            ),
        });
    }
    Ok(Some(Resolved::new(schema, change)))
}

/// Converts rows of one transaction; tables are looked up in `history` at `lookup_ts`; every
/// row carries the transaction's commit ts, commit time and GTID.
fn convert_rows(
    history: &mut SchemaHistory,
    lookup_ts: Ts,
    (commit_ts, commit_time_ms, gtid): (Ts, u64, Option<sluice_types::Gtid>),
    changes: Vec<RowChange>,
) -> Result<Vec<RowEvent>> {
    // Per transaction, each TABLE_MAP resolves once (rows of one ROWS event share its Arc).
    let mut cache: Vec<Resolved> = Vec::new();
    let mut rows = Vec::with_capacity(changes.len());
    for change in changes {
        let r = match cache
            .iter()
            .position(|r| Arc::ptr_eq(&r.meta, &change.table))
        {
            Some(i) => &cache[i],
            None => match resolve_table(history, lookup_ts, &change)? {
                Some(r) => {
                    cache.push(r);
                    &cache[cache.len() - 1]
                }
                None => continue,
            },
        };
        let fix = |img: Option<Vec<Value>>| -> Option<Vec<Value>> {
            let mut img = img?;
            for (i, fix) in &r.fixes {
                if let Some(v) = img.get_mut(*i) {
                    fix.apply(v);
                }
            }
            Some(img)
        };
        let (id, spec) = (r.id, &r.spec);
        let ev =
            |kind: RowKind, key: Key, before: Option<Vec<_>>, after: Option<Vec<_>>| RowEvent {
                table_id: id,
                schema_version: r.version,
                commit_ts,
                commit_time_ms,
                kind,
                key,
                before,
                after,
                snapshot: false,
                gtid,
            };
        let (before, after) = (fix(change.before), fix(change.after));
        let Some(kind) =
            versioned_kind(r.row_end, change.kind, before.as_deref(), after.as_deref())
        else {
            continue;
        };
        match kind {
            RowKind::Insert => {
                let after = after.unwrap_or_default();
                rows.push(ev(
                    RowKind::Insert,
                    row_key(id, &after, spec),
                    None,
                    Some(after),
                ));
            }
            RowKind::Delete => {
                let before = before.unwrap_or_default();
                rows.push(ev(
                    RowKind::Delete,
                    row_key(id, &before, spec),
                    Some(before),
                    None,
                ));
            }
            RowKind::Update => {
                let before = before.unwrap_or_default();
                let after = after.unwrap_or_default();
                let kb = row_key(id, &before, spec);
                let ka = row_key(id, &after, spec);
                if kb == ka {
                    rows.push(ev(RowKind::Update, ka, Some(before), Some(after)));
                } else {
                    rows.push(ev(RowKind::Delete, kb, Some(before), None));
                    rows.push(ev(RowKind::Insert, ka, None, Some(after)));
                }
            }
        }
    }
    Ok(rows)
}

/// The index of a system-versioned table's `ROW END` column (explicit or MariaDB's implicit
/// `row_end`), if the table has one.
fn period_end(schema: &TableSchema) -> Option<usize> {
    let ends = schema.columns.iter().enumerate();
    let mut ends = ends.filter(|(_, c)| c.generated == Some(sluice_types::Generation::RowEnd));
    let end = ends.next().map(|(i, _)| i);
    if end.is_some() {
        return end;
    }
    // Histories saved before the period columns had their own generation.
    let n = schema.columns.len();
    let [.., s, e] = schema.columns.as_slice() else {
        return None;
    };
    (s.name == "row_start" && e.name == "row_end" && s.generated.is_some() && e.generated.is_some())
        .then(|| n - 1)
}

/// A `row_end` at or past 2038-01-19 03:14:07 (MariaDB's largest TIMESTAMP; 2106 on newer
/// 64-bit servers) marks the current version of a row; any earlier one, a history row.
fn is_current(row_end: Option<&Value>) -> bool {
    match row_end {
        Some(Value::Timestamp { micros }) => *micros >= 0x7FFF_FFFF * 1_000_000,
        _ => true,
    }
}

/// What a row change of a system-versioned table means for a downstream that keeps only current
/// rows: MariaDB logs a DELETE as an UPDATE that ends the row's period, and an UPDATE as the
/// update plus an INSERT of the old version as a history row. `None`: a history row, not
/// replicated. Tables without `row_end` keep their kind.
fn versioned_kind(
    row_end: Option<usize>,
    kind: RowKind,
    before: Option<&[Value]>,
    after: Option<&[Value]>,
) -> Option<RowKind> {
    let Some(i) = row_end else {
        return Some(kind);
    };
    let current = |img: Option<&[Value]>| is_current(img.and_then(|v| v.get(i)));
    match kind {
        RowKind::Insert => current(after).then_some(RowKind::Insert),
        RowKind::Delete => current(before).then_some(RowKind::Delete),
        RowKind::Update if !current(before) => None,
        RowKind::Update if !current(after) => Some(RowKind::Delete),
        RowKind::Update => Some(RowKind::Update),
    }
}

/// A reader plus the history it keeps current: the unit a node runs per upstream.
pub struct Capture {
    pub reader: BinlogReader,
    pub history: SchemaHistory,
    /// The last heartbeat row seen (see [`crate::heartbeat`]).
    pub last_heartbeat: Option<HeartbeatSample>,
    /// Items of the last transaction not yet returned (a CREATE ... SELECT gives two).
    queued: std::collections::VecDeque<Captured>,
    /// The open large transaction's staged chunks.
    staging: Staging,
    /// Millisecond commit times from the heartbeats ([`crate::commit_clock`]).
    clock: crate::commit_clock::CommitClock,
    /// The commit time (ms) of the last transaction handed on (see [`HEARTBEAT_PASS_MS`]).
    passed_ms: u64,
    /// Set by whoever waits for capture to reach a binlog position (a snapshot chunk read at
    /// it, a copy's checkpoint, a changefeed's bootstrap at its start point): while it is,
    /// every heartbeat transaction is handed on at once.
    pub position_wanted: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
}

/// A transaction of heartbeat rows only is handed on (moving the resolved ts of every
/// dispatcher) at most once per this much upstream time, unless a position is wanted
/// ([`Capture::position_wanted`]: something waits for capture to pass a position);
/// the others only stamp the commit clock. Heartbeats are written every 100 ms for millisecond commit times, and every resolved
/// advance costs each idle dispatcher a round through the sink: 2,000 idle tables took 17.7% of
/// a core at 10 advances a second and 6.2% at one (`bench/many_tables.sh`).
pub const HEARTBEAT_PASS_MS: u64 = 1000;

/// One heartbeat row as captured.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeartbeatSample {
    pub node: String,
    pub commit_ts: Ts,
    /// When the heartbeat was written (the upstream's clock, `NOW(6)`, ms since the Unix epoch).
    pub written_ms: u64,
    /// Local time of capture minus `written_ms`: the capture lag (clocks assumed in sync).
    pub lag_ms: u64,
}

/// Whether rows of `db.t` are captured at all (not a system schema, Sluice's heartbeat table or
/// a sequence).
fn is_captured(history: &SchemaHistory, db: &str, t: &str) -> bool {
    !is_system_schema(db) && !is_heartbeat(db, t) && !history.is_sequence(db, t)
}

impl Capture {
    fn position_is_wanted(&self) -> bool {
        self.position_wanted
            .as_ref()
            .is_some_and(|w| w.load(std::sync::atomic::Ordering::Relaxed))
    }
}

/// A transaction of nothing but heartbeat rows (no statement, nothing chunked before it).
fn only_heartbeats(t: &Transaction) -> bool {
    t.statement.is_none()
        && t.chunked_rows == 0
        && t.unreplicable.is_empty()
        && !t.rows.is_empty()
        && t.rows
            .iter()
            .all(|r| is_heartbeat(&r.table.database, &r.table.table))
}

fn is_heartbeat(db: &str, table: &str) -> bool {
    db == crate::heartbeat::HEARTBEAT_DB && table == crate::heartbeat::HEARTBEAT_TABLE
}

impl Capture {
    /// Samples a heartbeat row of `t`, and stamps `t`'s commit time in ms.
    fn sample_heartbeat(&mut self, t: &mut Transaction) {
        let mut upstream_ms = None;
        for r in &t.rows {
            if !is_heartbeat(&r.table.database, &r.table.table) {
                continue;
            }
            if let Some([Value::Text(node), Value::UInt(ms)]) = r.after.as_deref() {
                upstream_ms = Some(*ms);
                self.last_heartbeat = Some(HeartbeatSample {
                    node: node.clone(),
                    commit_ts: t.commit_ts,
                    written_ms: *ms,
                    lag_ms: crate::heartbeat::now_ms().saturating_sub(*ms),
                });
            }
        }
        t.commit_time_ms =
            self.clock
                .stamp(t.commit_time_ms, upstream_ms, crate::heartbeat::now_ms());
    }

    pub fn new(reader: BinlogReader, history: SchemaHistory) -> Self {
        Capture {
            reader,
            history,
            last_heartbeat: None,
            queued: Default::default(),
            staging: Staging::default(),
            clock: Default::default(),
            passed_ms: 0,
            position_wanted: None,
        }
    }

    /// The next captured item. Fatal errors are returned; retryable ones are handled inside the
    /// reader.
    pub async fn next(&mut self) -> Result<Captured> {
        loop {
            if let Some(item) = self.queued.pop_front() {
                return Ok(item);
            }
            match self.reader.next().await? {
                ReaderEvent::Resolved(ts) => return Ok(Captured::Resolved(ts)),
                ReaderEvent::Chunk(c) => {
                    return convert_chunk(&mut self.history, &mut self.staging, c)
                }
                ReaderEvent::Abort(start) => {
                    self.staging = Staging::default();
                    return Ok(Captured::Abort(start));
                }
                ReaderEvent::Transaction(mut t) => {
                    self.sample_heartbeat(&mut t);
                    if only_heartbeats(&t)
                        && t.commit_time_ms < self.passed_ms + HEARTBEAT_PASS_MS
                        && !self.position_is_wanted()
                    {
                        continue;
                    }
                    self.passed_ms = t.commit_time_ms;
                    let staging = if t.chunked_rows > 0 {
                        std::mem::take(&mut self.staging)
                    } else {
                        Staging::default()
                    };
                    self.queued
                        .extend(convert_staged(&mut self.history, t, staging)?)
                }
            }
        }
    }
}

/// Feeds one [`Capture`] into one [`EventStore`]: the loop a node runs per upstream.
///
/// Invariants: the store's `resolved` only advances past a DDL (or any statement that changed
/// the history, e.g. ALTER DATABASE) after the history containing it was saved through the
/// [`SchemaStore`]; a restart resumes the reader at the store's
/// durable `resolved` ([`Pump::resume_position`]), so the history is never behind the store.
pub struct Pump {
    pub capture: Capture,
    pub store: Arc<EventStore>,
    pub history_store: Arc<dyn SchemaStore>,
    /// Call [`EventStore::persist`] after this many transactions (and on every DDL).
    pub persist_every: u64,
    since_persist: u64,
    /// The history revision last saved through `history_store`.
    saved_revision: u64,
}

impl Pump {
    pub fn new(
        capture: Capture,
        store: Arc<EventStore>,
        history_store: Arc<dyn SchemaStore>,
    ) -> Self {
        Pump {
            capture,
            store,
            history_store,
            persist_every: 1000,
            since_persist: 0,
            saved_revision: 0,
        }
    }

    /// Where a reader feeding `store` must start: right after the store's resolved ts, or the
    /// history's snapshot position for an empty store.
    pub fn resume_position(store: &EventStore, history: &SchemaHistory) -> BinlogPos {
        let r = store.resolved();
        if r <= history.snapshot_ts {
            history.snapshot_pos.clone()
        } else {
            BinlogPos::from_ts(history.snapshot_pos.base(), r)
        }
    }

    /// Captures one item into the store and returns it.
    pub async fn step(&mut self) -> Result<Captured> {
        let item = self.capture.next().await?;
        if self.capture.history.revision != self.saved_revision && !matches!(item, Captured::Ddl(_))
        {
            // Versions completed or repaired from the binlog: saved before their rows are
            // stored, so a restart never finds rows whose version the saved history lacks.
            self.history_store.save(&self.capture.history).await?;
            self.saved_revision = self.capture.history.revision;
        }
        match &item {
            Captured::Rows { commit_ts, rows } => {
                if self.capture.history.head == *commit_ts {
                    // A statement that changed the history without a DDL event (ALTER DATABASE,
                    // a sequence, a skipped DDL): saved like a DDL, so a restart past it keeps it.
                    self.history_store.save(&self.capture.history).await?;
                    self.since_persist = self.persist_every;
                }
                self.store.append_txn(*commit_ts, rows)?;
                self.since_persist += 1;
            }
            Captured::Ddl(ddl) => {
                self.history_store.save(&self.capture.history).await?;
                self.saved_revision = self.capture.history.revision;
                self.store.append_ddl(ddl)?;
                self.since_persist = self.persist_every;
            }
            Captured::Resolved(ts) => {
                self.store.advance(*ts);
                self.since_persist = self.persist_every;
            }
            Captured::Chunk {
                start,
                first_seq,
                rows,
            } => {
                self.store
                    .stage(start.ts().unwrap_or(0), *first_seq, rows)?;
            }
            Captured::CommitStaged {
                commit_ts,
                commit_time_ms,
                start,
                staged_rows,
                rows,
            } => {
                self.store.commit_staged(
                    (*commit_ts, *commit_time_ms),
                    start.ts().unwrap_or(0),
                    *staged_rows,
                    rows,
                )?;
                self.since_persist += 1;
            }
            Captured::Abort(_) => self.store.abort_staged()?,
        }
        if self.since_persist >= self.persist_every {
            self.store.persist()?;
            self.since_persist = 0;
        }
        Ok(item)
    }
}
