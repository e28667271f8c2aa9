//! The per-node event store: every captured row of one upstream, on local disk (redb), ordered
//! by `(table id, commit ts, seq)` where `seq` is the row's position in its transaction; DDL
//! events by commit ts. One reader per upstream per node feeds it; the dispatchers of every
//! changefeed on the node read spans from it.
//!
//! Invariants:
//! - the store holds only whole transactions with commit ts `<= resolved()`: rows are appended
//!   a transaction at a time, `resolved` is advanced after them, and opening a store drops
//!   whatever lies above the last durable `resolved` (a crash mid-append leaves no partial
//!   transaction visible). The reader restarts from `resolved()` (see
//!   [`crate::pos::BinlogPos::from_ts`]), so nothing is lost or duplicated;
//! - [`EventStore::persist`] makes everything appended so far durable (one fsync); appends in
//!   between are not fsynced (faster; a crash loses them, and the reader re-reads them);
//! - [`EventStore::scan`] serves any span from any start ts `>= gc_ts()`; a start below it is
//!   [`StoreError::Collected`], never a silent gap;
//! - a read that can only come back empty is answered without a read transaction: the store
//!   keeps in memory each table's greatest row commit ts and every DDL's commit ts written since
//!   it was opened (what lies above the `resolved` it opened at), updated after the data is
//!   committed and before `resolved` passes it;
//! - memory: the page cache is bounded by [`StoreConfig::cache_bytes`]; appends are written in
//!   write transactions of at most [`MAX_WRITE_BATCH_BYTES`]; a large transaction arrives in
//!   chunks that are staged on disk ([`EventStore::stage`]) and moved into place at its commit
//!   in bounded batches ([`EventStore::commit_staged`]), so it streams through disk.

use crate::error::CaptureError;
use redb::{Database, Durability, ReadableDatabase, ReadableTable, TableDefinition};
use sluice_types::{DdlEvent, Key, RowEvent, Span, TableId, Ts};
use std::path::Path;
use std::sync::Mutex;

const ROWS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("rows");
const DDLS: TableDefinition<u64, &[u8]> = TableDefinition::new("ddls");
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
/// Rows of large transactions not committed yet: key (start ts u64 BE, seq u32 BE).
const STAGE: TableDefinition<&[u8], &[u8]> = TableDefinition::new("stage");

/// Largest amount of row data written in one redb write transaction.
pub const MAX_WRITE_BATCH_BYTES: usize = 16 << 20;
/// Default page cache bound.
pub const DEFAULT_CACHE_BYTES: usize = 64 << 20;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("event store: {0}")]
    Db(String),
    #[error("start ts {start} is below the event store's gc ts {gc}: those events were collected")]
    Collected { start: Ts, gc: Ts },
    #[error("event store: corrupt record: {0}")]
    Corrupt(String),
}

impl From<StoreError> for CaptureError {
    fn from(e: StoreError) -> Self {
        CaptureError::Storage(e.to_string())
    }
}

fn db_err(e: impl std::fmt::Display) -> StoreError {
    StoreError::Db(e.to_string())
}

#[derive(Clone, Debug)]
pub struct StoreConfig {
    pub cache_bytes: usize,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            cache_bytes: DEFAULT_CACHE_BYTES,
        }
    }
}

/// Position of a row in the store, for resuming a scan.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Cursor {
    pub ts: Ts,
    pub seq: u32,
}

/// One batch of a scan.
#[derive(Clone, Debug, PartialEq)]
pub struct ScanBatch {
    pub rows: Vec<RowEvent>,
    /// Resume after this cursor; `None` when the scan reached `upto`.
    pub next: Option<Cursor>,
}

fn row_key(table: TableId, ts: Ts, seq: u32) -> [u8; 20] {
    let mut k = [0u8; 20];
    k[..8].copy_from_slice(&table.0.to_be_bytes());
    k[8..16].copy_from_slice(&ts.to_be_bytes());
    k[16..].copy_from_slice(&seq.to_be_bytes());
    k
}

fn stage_key(start_ts: Ts, seq: u32) -> [u8; 12] {
    let mut k = [0u8; 12];
    k[..8].copy_from_slice(&start_ts.to_be_bytes());
    k[8..].copy_from_slice(&seq.to_be_bytes());
    k
}

fn parse_key(k: &[u8]) -> Option<(TableId, Ts, u32)> {
    if k.len() != 20 {
        return None;
    }
    let t = u64::from_be_bytes(k[..8].try_into().ok()?);
    let ts = u64::from_be_bytes(k[8..16].try_into().ok()?);
    let seq = u32::from_be_bytes(k[16..].try_into().ok()?);
    Some((TableId(t), ts, seq))
}

/// Value layout: row key length (u32 BE), row key bytes, the event in [`crate::codec`]. The key
/// comes first so span filtering does not decode rows outside the span.
fn encode_value(ev: &RowEvent) -> Result<Vec<u8>, StoreError> {
    let mut v = Vec::with_capacity(64 + 2 * ev.key.0.len());
    v.extend_from_slice(&(ev.key.0.len() as u32).to_be_bytes());
    v.extend_from_slice(&ev.key.0);
    crate::codec::encode(ev, &mut v);
    Ok(v)
}

fn value_key(v: &[u8]) -> Option<&[u8]> {
    let n = u32::from_be_bytes(v.get(..4)?.try_into().ok()?) as usize;
    v.get(4..4 + n)
}

fn decode_value(v: &[u8]) -> Result<RowEvent, StoreError> {
    let n = value_key(v)
        .ok_or_else(|| StoreError::Corrupt("short value".into()))?
        .len();
    crate::codec::decode(&v[4 + n..]).map_err(StoreError::Corrupt)
}

/// The first table id `>= from` that has rows.
fn next_table(
    t: &impl ReadableTable<&'static [u8], &'static [u8]>,
    from: u64,
) -> Result<Option<TableId>, StoreError> {
    let start = row_key(TableId(from), 0, 0);
    let mut it = t.range(start.as_slice()..).map_err(db_err)?;
    match it.next() {
        Some(item) => Ok(parse_key(item.map_err(db_err)?.0.value()).map(|(t, _, _)| t)),
        None => Ok(None),
    }
}

/// See the module docs.
pub struct EventStore {
    db: Database,
    /// In-memory `resolved` (advanced by appends; durable after `persist`).
    state: Mutex<(Ts, Ts)>, // (resolved, gc)
    recent: Mutex<Recent>,
}

/// What was written since the store was opened, kept in memory so a scan or a DDL read that can
/// only come back empty (an idle table asked again after every resolved advance, thousands of
/// times a second at many tables) needs no read transaction. Everything above `opened` was
/// written by this process (opening drops what lies above the durable `resolved`), so a range
/// that starts at or above it holds exactly what these maps say. Updated after the data is
/// committed and before `resolved` passes it.
struct Recent {
    /// `resolved` when the store was opened.
    opened: Ts,
    /// Each table's greatest row commit ts written since then.
    tables: std::collections::BTreeMap<TableId, Ts>,
    /// The commit ts of every DDL written since then (pruned by `gc`).
    ddls: std::collections::BTreeSet<Ts>,
}

impl Recent {
    /// No row of `table` lies after `from` (within the range the maps cover).
    fn no_rows_after(&self, table: TableId, from: Cursor) -> bool {
        // Rows at `opened` itself may be on disk from before: covered only from after them.
        let covered = from.ts > self.opened || (from.ts == self.opened && from.seq == u32::MAX);
        if !covered {
            return false;
        }
        match self.tables.get(&table) {
            None => true,
            Some(&last) => last < from.ts || (last == from.ts && from.seq == u32::MAX),
        }
    }

    /// No DDL lies in `(after, upto]` (within the range the set covers).
    fn no_ddls(&self, after: Ts, upto: Ts) -> bool {
        after >= self.opened
            && self
                .ddls
                .range(after.saturating_add(1)..=upto)
                .next()
                .is_none()
    }

    fn note_rows(&mut self, table: TableId, ts: Ts) {
        let last = self.tables.entry(table).or_insert(ts);
        *last = (*last).max(ts);
    }
}

impl EventStore {
    /// Opens (or creates) the store at `path`, dropping anything above the durable `resolved`.
    pub fn open(path: &Path, cfg: StoreConfig) -> Result<EventStore, StoreError> {
        let db = Database::builder()
            .set_cache_size(cfg.cache_bytes)
            .create(path)
            .map_err(db_err)?;
        let (resolved, gc);
        {
            let w = db.begin_write().map_err(db_err)?;
            {
                let meta = w.open_table(META).map_err(db_err)?;
                resolved = meta
                    .get("resolved")
                    .map_err(db_err)?
                    .map(|g| g.value())
                    .unwrap_or(0);
                gc = meta
                    .get("gc")
                    .map_err(db_err)?
                    .map(|g| g.value())
                    .unwrap_or(0);
                let mut rows = w.open_table(ROWS).map_err(db_err)?;
                // Drop rows above resolved (an append not followed by persist before a crash):
                // one range per table, so opening costs O(tables), not O(rows).
                if resolved < Ts::MAX {
                    let mut from = 0u64;
                    while let Some(tid) = next_table(&rows, from)? {
                        let lo = row_key(tid, resolved + 1, 0);
                        let hi = row_key(tid, Ts::MAX, u32::MAX);
                        rows.retain_in(lo.as_slice()..=hi.as_slice(), |_, _| false)
                            .map_err(db_err)?;
                        match tid.0.checked_add(1) {
                            Some(n) => from = n,
                            None => break,
                        }
                    }
                }
                // Staged rows belong to transactions that will be read again.
                let mut stage = w.open_table(STAGE).map_err(db_err)?;
                stage.retain(|_, _| false).map_err(db_err)?;
                let mut ddls = w.open_table(DDLS).map_err(db_err)?;
                ddls.retain(|ts, _| ts <= resolved).map_err(db_err)?;
            }
            w.commit().map_err(db_err)?;
        }
        Ok(EventStore {
            db,
            state: Mutex::new((resolved, gc)),
            recent: Mutex::new(Recent {
                opened: resolved,
                tables: std::collections::BTreeMap::new(),
                ddls: std::collections::BTreeSet::new(),
            }),
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, (Ts, Ts)> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn recent(&self) -> std::sync::MutexGuard<'_, Recent> {
        self.recent.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Everything with commit ts `<= resolved()` is in the store.
    pub fn resolved(&self) -> Ts {
        self.state().0
    }

    /// Events with commit ts `<= gc_ts()` may have been collected.
    pub fn gc_ts(&self) -> Ts {
        self.state().1
    }

    /// Appends the rows of one transaction (all with `commit_ts`) and advances `resolved` to it.
    /// Transactions must come in commit-ts order; one at or below `resolved()` is ignored
    /// (a reader re-delivering after a restart).
    pub fn append_txn(&self, commit_ts: Ts, rows: &[RowEvent]) -> Result<(), StoreError> {
        if commit_ts <= self.resolved() {
            return Ok(());
        }
        self.write_rows(commit_ts, 0, rows)?;
        self.state().0 = commit_ts;
        Ok(())
    }

    /// Writes rows at `commit_ts` with positions from `first_seq`, in bounded write batches.
    fn write_rows(
        &self,
        commit_ts: Ts,
        first_seq: usize,
        rows: &[RowEvent],
    ) -> Result<(), StoreError> {
        let mut i = 0;
        while i < rows.len() {
            let mut w = self.db.begin_write().map_err(db_err)?;
            w.set_durability(Durability::None).map_err(db_err)?;
            {
                let mut t = w.open_table(ROWS).map_err(db_err)?;
                let mut bytes = 0;
                while i < rows.len() && bytes < MAX_WRITE_BATCH_BYTES {
                    let r = &rows[i];
                    let v = if r.commit_ts == commit_ts {
                        encode_value(r)?
                    } else {
                        encode_value(&RowEvent {
                            commit_ts,
                            ..r.clone()
                        })?
                    };
                    bytes += v.len() + 20;
                    let seq = u32::try_from(first_seq + i).map_err(|_| {
                        StoreError::Db("more than 2^32 rows in one transaction".into())
                    })?;
                    t.insert(row_key(r.table_id, commit_ts, seq).as_slice(), v.as_slice())
                        .map_err(db_err)?;
                    i += 1;
                }
            }
            w.commit().map_err(db_err)?;
        }
        let mut recent = self.recent();
        let mut last = None;
        for r in rows {
            // A transaction's rows come in runs of one table: one map update per run.
            if last != Some(r.table_id) {
                recent.note_rows(r.table_id, commit_ts);
                last = Some(r.table_id);
            }
        }
        Ok(())
    }

    /// Stages early rows of a large transaction (identified by the ts of its start position) at
    /// positions `first_seq..`. Nothing staged is visible to scans until
    /// [`EventStore::commit_staged`]; a reopened store drops whatever was staged.
    pub fn stage(
        &self,
        start_ts: Ts,
        first_seq: usize,
        rows: &[RowEvent],
    ) -> Result<(), StoreError> {
        let mut i = 0;
        while i < rows.len() {
            let mut w = self.db.begin_write().map_err(db_err)?;
            w.set_durability(Durability::None).map_err(db_err)?;
            {
                let mut t = w.open_table(STAGE).map_err(db_err)?;
                let mut bytes = 0;
                while i < rows.len() && bytes < MAX_WRITE_BATCH_BYTES {
                    let v = encode_value(&rows[i])?;
                    bytes += v.len() + 12;
                    let seq = u32::try_from(first_seq + i).map_err(|_| {
                        StoreError::Db("more than 2^32 rows in one transaction".into())
                    })?;
                    t.insert(stage_key(start_ts, seq).as_slice(), v.as_slice())
                        .map_err(db_err)?;
                    i += 1;
                }
            }
            w.commit().map_err(db_err)?;
        }
        Ok(())
    }

    /// Commits a large transaction: moves its `staged_rows` staged rows into place at
    /// `commit_ts` with the commit time (bounded batches; they were staged before either was
    /// known), appends the remaining `rows` after them, then advances `resolved` to `commit_ts`.
    pub fn commit_staged(
        &self,
        (commit_ts, commit_time_ms): (Ts, u64),
        start_ts: Ts,
        staged_rows: usize,
        rows: &[RowEvent],
    ) -> Result<(), StoreError> {
        if commit_ts <= self.resolved() {
            return self.abort_staged();
        }
        let mut moved = 0usize;
        let mut tables = std::collections::BTreeSet::new();
        loop {
            let w = self.db.begin_write().map_err(db_err)?;
            let mut batch_done = true;
            {
                let mut stage = w.open_table(STAGE).map_err(db_err)?;
                let mut dst = w.open_table(ROWS).map_err(db_err)?;
                let lo = stage_key(start_ts, 0);
                let hi = stage_key(start_ts, u32::MAX);
                let mut batch: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
                let mut bytes = 0;
                for item in stage.range(lo.as_slice()..=hi.as_slice()).map_err(db_err)? {
                    let (k, v) = item.map_err(db_err)?;
                    bytes += v.value().len();
                    batch.push((k.value().to_vec(), v.value().to_vec()));
                    if bytes >= MAX_WRITE_BATCH_BYTES {
                        batch_done = false;
                        break;
                    }
                }
                for (k, v) in &batch {
                    let seq = u32::from_be_bytes(
                        k.get(8..12)
                            .and_then(|s| s.try_into().ok())
                            .ok_or_else(|| StoreError::Corrupt("stage key".into()))?,
                    );
                    let mut ev = decode_value(v)?;
                    tables.insert(ev.table_id);
                    ev.commit_ts = commit_ts;
                    ev.commit_time_ms = commit_time_ms;
                    dst.insert(
                        row_key(ev.table_id, commit_ts, seq).as_slice(),
                        encode_value(&ev)?.as_slice(),
                    )
                    .map_err(db_err)?;
                    stage.remove(k.as_slice()).map_err(db_err)?;
                }
                moved += batch.len();
            }
            w.commit().map_err(db_err)?;
            if batch_done {
                break;
            }
        }
        for t in tables {
            self.recent().note_rows(t, commit_ts);
        }
        if moved != staged_rows {
            return Err(StoreError::Corrupt(format!(
                "transaction at {start_ts} had {staged_rows} staged rows, found {moved}"
            )));
        }
        self.write_rows(commit_ts, staged_rows, rows)?;
        self.state().0 = commit_ts;
        Ok(())
    }

    /// Drops every staged row (the reader will deliver the transaction again).
    pub fn abort_staged(&self) -> Result<(), StoreError> {
        let w = self.db.begin_write().map_err(db_err)?;
        {
            let mut stage = w.open_table(STAGE).map_err(db_err)?;
            stage.retain(|_, _| false).map_err(db_err)?;
        }
        w.commit().map_err(db_err)
    }

    /// Stores a DDL event and advances `resolved` to its commit ts.
    pub fn append_ddl(&self, ddl: &DdlEvent) -> Result<(), StoreError> {
        if ddl.commit_ts <= self.resolved() {
            return Ok(());
        }
        let mut w = self.db.begin_write().map_err(db_err)?;
        w.set_durability(Durability::None).map_err(db_err)?;
        {
            let mut t = w.open_table(DDLS).map_err(db_err)?;
            let v = serde_json::to_vec(ddl).map_err(|e| StoreError::Corrupt(e.to_string()))?;
            t.insert(ddl.commit_ts, v.as_slice()).map_err(db_err)?;
        }
        w.commit().map_err(db_err)?;
        self.recent().ddls.insert(ddl.commit_ts);
        self.state().0 = ddl.commit_ts;
        Ok(())
    }

    /// Advances `resolved` without data (the reader is idle at `ts`).
    pub fn advance(&self, ts: Ts) {
        let mut s = self.state();
        if ts > s.0 {
            s.0 = ts;
        }
    }

    /// Makes everything appended so far durable, including `resolved` (one fsync).
    pub fn persist(&self) -> Result<Ts, StoreError> {
        let resolved = self.resolved();
        let w = self.db.begin_write().map_err(db_err)?;
        {
            let mut meta = w.open_table(META).map_err(db_err)?;
            meta.insert("resolved", resolved).map_err(db_err)?;
        }
        w.commit().map_err(db_err)?;
        Ok(resolved)
    }

    /// Rows of `span` with `after < commit ts <= upto`, in (commit ts, seq) order, at most `limit`
    /// rows; `next` says where to resume when the limit was hit.
    pub fn scan(
        &self,
        span: &Span,
        after: Ts,
        upto: Ts,
        limit: usize,
    ) -> Result<ScanBatch, StoreError> {
        self.scan_from(
            span,
            Cursor {
                ts: after,
                seq: u32::MAX,
            },
            upto,
            limit,
        )
    }

    /// Like [`EventStore::scan`], resuming strictly after `from`.
    pub fn scan_from(
        &self,
        span: &Span,
        from: Cursor,
        upto: Ts,
        limit: usize,
    ) -> Result<ScanBatch, StoreError> {
        let gc = self.gc_ts();
        if from.ts < gc {
            return Err(StoreError::Collected { start: from.ts, gc });
        }
        let upto = upto.min(self.resolved());
        let past = from.ts > upto || (from.ts == upto && from.seq == u32::MAX);
        if past || self.recent().no_rows_after(span.table, from) {
            return Ok(ScanBatch {
                rows: vec![],
                next: None,
            });
        }
        let r = self.db.begin_read().map_err(db_err)?;
        let t = match r.open_table(ROWS) {
            Ok(t) => t,
            Err(redb::TableError::TableDoesNotExist(_)) => {
                return Ok(ScanBatch {
                    rows: vec![],
                    next: None,
                })
            }
            Err(e) => return Err(db_err(e)),
        };
        let start = match from.seq.checked_add(1) {
            Some(s) => row_key(span.table, from.ts, s),
            None => row_key(span.table, from.ts.saturating_add(1), 0),
        };
        let end = row_key(span.table, upto, u32::MAX);
        let mut rows = Vec::new();
        for item in t.range(start.as_slice()..=end.as_slice()).map_err(db_err)? {
            let (k, v) = item.map_err(db_err)?;
            let (_, ts, seq) =
                parse_key(k.value()).ok_or_else(|| StoreError::Corrupt("bad key".into()))?;
            let val = v.value();
            let key = Key(value_key(val)
                .ok_or_else(|| StoreError::Corrupt("short value".into()))?
                .to_vec());
            if !span.contains(&key) {
                continue;
            }
            if rows.len() >= limit {
                // Resume exactly at the first row not returned.
                let next = if seq == 0 {
                    Cursor {
                        ts: ts - 1,
                        seq: u32::MAX,
                    }
                } else {
                    Cursor { ts, seq: seq - 1 }
                };
                return Ok(ScanBatch {
                    rows,
                    next: Some(next),
                });
            }
            rows.push(decode_value(val)?);
        }
        Ok(ScanBatch { rows, next: None })
    }

    /// DDL events with `after < commit ts <= upto`.
    pub fn ddls(&self, after: Ts, upto: Ts) -> Result<Vec<DdlEvent>, StoreError> {
        if after >= upto || self.recent().no_ddls(after, upto) {
            return Ok(Vec::new());
        }
        let r = self.db.begin_read().map_err(db_err)?;
        let t = match r.open_table(DDLS) {
            Ok(t) => t,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(vec![]),
            Err(e) => return Err(db_err(e)),
        };
        let mut out = Vec::new();
        for item in t.range(after + 1..=upto).map_err(db_err)? {
            let (_, v) = item.map_err(db_err)?;
            out.push(
                serde_json::from_slice(v.value())
                    .map_err(|e| StoreError::Corrupt(e.to_string()))?,
            );
        }
        Ok(out)
    }

    /// Removes every event with commit ts `<= upto` (the minimum checkpoint of the node's
    /// changefeeds); scans must then start at or above `upto`. Returns the rows removed.
    pub fn gc(&self, upto: Ts) -> Result<u64, StoreError> {
        if upto <= self.gc_ts() {
            return Ok(0);
        }
        let mut removed = 0u64;
        let w = self.db.begin_write().map_err(db_err)?;
        {
            let mut t = w.open_table(ROWS).map_err(db_err)?;
            let mut from = 0u64;
            while let Some(tid) = next_table(&t, from)? {
                let lo = row_key(tid, 0, 0);
                let hi = row_key(tid, upto, u32::MAX);
                t.retain_in(lo.as_slice()..=hi.as_slice(), |_, _| {
                    removed += 1;
                    false
                })
                .map_err(db_err)?;
                match tid.0.checked_add(1) {
                    Some(n) => from = n,
                    None => break,
                }
            }
            let mut d = w.open_table(DDLS).map_err(db_err)?;
            d.retain_in(0..=upto, |_, _| false).map_err(db_err)?;
            let mut meta = w.open_table(META).map_err(db_err)?;
            meta.insert("gc", upto).map_err(db_err)?;
        }
        w.commit().map_err(db_err)?;
        {
            let mut recent = self.recent();
            recent.ddls = recent.ddls.split_off(&upto.saturating_add(1));
        }
        self.state().1 = upto;
        Ok(removed)
    }
}
