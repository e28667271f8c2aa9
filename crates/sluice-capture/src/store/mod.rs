//! The per-node event store: every captured row of one upstream, on local disk (redb), ordered
//! by `(table id, commit ts, seq)` where `seq` is the row's position in its transaction; DDL
//! events by commit ts. One reader per upstream per node feeds it; the dispatchers of every
//! changefeed on the node read spans from it.
//!
//! Rows are kept in blocks (`block.rs`): a table's consecutive rows packed in one redb value of
//! up to 32 KiB, filled in memory (`tail.rs`) and written when full, when the store persists, or
//! when the open blocks together grow past a bound. A scan (`scan.rs`) reads the blocks on disk,
//! then the open block.
//!
//! Invariants:
//! - the store holds only whole transactions with commit ts `<= resolved()`: rows are appended
//!   a transaction at a time, `resolved` is advanced after them, and opening a store drops
//!   whatever lies above the last durable `resolved` (a crash mid-append leaves no partial
//!   transaction visible). The reader restarts from `resolved()` (see
//!   [`crate::pos::BinlogPos::from_ts`]), so nothing is lost or duplicated;
//! - [`EventStore::persist`] makes everything appended so far durable (the open blocks and
//!   `resolved`, one fsync); blocks written in between are not fsynced (faster; a crash loses
//!   them, and the reader re-reads them);
//! - [`EventStore::scan`] serves any span from any start ts `>= gc_ts()`; a start below it is
//!   [`StoreError::Collected`], never a silent gap;
//! - a read that can only come back empty is answered without a read transaction
//!   (`recent.rs`);
//! - lock order: the open blocks, then a redb write transaction (appends, persist); GC takes the
//!   open blocks only after its write transaction committed;
//! - memory: the page cache is bounded by [`StoreConfig::cache_bytes`], the open blocks by
//!   `tail::TAILS_BYTES` (8 MiB); blocks are written in write transactions of at most
//!   [`MAX_WRITE_BATCH_BYTES`]; a large transaction arrives in chunks that are staged on disk
//!   ([`EventStore::stage`]) and moved into place at its commit in bounded batches
//!   ([`EventStore::commit_staged`]), so it streams through disk;
//! - a store written before blocks (one redb value per row) is converted when it is opened
//!   (`migrate.rs`).

mod block;
mod migrate;
mod recent;
mod scan;
mod tail;
#[cfg(test)]
mod tests;

use crate::error::CaptureError;
use block::{block_key, parse_block_key};
use recent::Recent;
use redb::{Database, Durability, ReadableDatabase, ReadableTable, TableDefinition};
use sluice_types::{DdlEvent, RowEvent, Span, TableId, Ts};
use std::path::Path;
use std::sync::{Mutex, MutexGuard};
use tail::Sealed;
use tail::Tails;

/// Row blocks, keyed by their first row's (table id u64 BE, commit ts u64 BE, seq u32 BE).
const BLOCKS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("row_blocks");
const DDLS: TableDefinition<u64, &[u8]> = TableDefinition::new("ddls");
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
/// Rows of large transactions not committed yet: key (start ts u64 BE, seq u32 BE), value the
/// row's [`crate::codec`] record.
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

fn stage_key(start_ts: Ts, seq: u32) -> [u8; 12] {
    let mut k = [0u8; 12];
    k[..8].copy_from_slice(&start_ts.to_be_bytes());
    k[8..].copy_from_slice(&seq.to_be_bytes());
    k
}

fn seq_of(i: usize) -> Result<u32, StoreError> {
    u32::try_from(i).map_err(|_| StoreError::Db("more than 2^32 rows in one transaction".into()))
}

/// The first table id `>= from` that has blocks.
fn next_table(
    t: &impl ReadableTable<&'static [u8], &'static [u8]>,
    from: u64,
) -> Result<Option<TableId>, StoreError> {
    let start = block_key(TableId(from), Cursor { ts: 0, seq: 0 });
    let mut it = t.range(start.as_slice()..).map_err(db_err)?;
    match it.next() {
        Some(item) => Ok(parse_block_key(item.map_err(db_err)?.0.value()).map(|(t, _)| t)),
        None => Ok(None),
    }
}

/// Every table with blocks, in id order (one seek per table: O(tables), not O(rows)).
fn tables_with_blocks(
    t: &impl ReadableTable<&'static [u8], &'static [u8]>,
) -> Result<Vec<TableId>, StoreError> {
    let mut tables = Vec::new();
    let mut from = 0u64;
    while let Some(tid) = next_table(t, from)? {
        tables.push(tid);
        match tid.0.checked_add(1) {
            Some(n) => from = n,
            None => break,
        }
    }
    Ok(tables)
}

/// See the module docs.
pub struct EventStore {
    db: Database,
    /// In-memory `resolved` (advanced by appends; durable after `persist`).
    state: Mutex<(Ts, Ts)>, // (resolved, gc)
    recent: Mutex<Recent>,
    tails: Mutex<Tails>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
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
                let get = |k: &str| -> Result<u64, StoreError> {
                    Ok(meta.get(k).map_err(db_err)?.map(|g| g.value()).unwrap_or(0))
                };
                (resolved, gc) = (get("resolved")?, get("gc")?);
            }
            migrate::rows_to_blocks(&w, resolved)?;
            {
                let mut blocks = w.open_table(BLOCKS).map_err(db_err)?;
                drop_above(&mut blocks, resolved)?;
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
            tails: Mutex::new(Tails::default()),
        })
    }

    fn state(&self) -> MutexGuard<'_, (Ts, Ts)> {
        lock(&self.state)
    }

    fn recent(&self) -> MutexGuard<'_, Recent> {
        lock(&self.recent)
    }

    fn tails(&self) -> MutexGuard<'_, Tails> {
        lock(&self.tails)
    }

    /// Everything with commit ts `<= resolved()` is in the store.
    pub fn resolved(&self) -> Ts {
        self.state().0
    }

    /// Events with commit ts `<= gc_ts()` may have been collected.
    pub fn gc_ts(&self) -> Ts {
        self.state().1
    }

    /// Advances the in-memory `resolved` (never back).
    fn resolve(&self, ts: Ts) {
        let mut s = self.state();
        assert!(ts >= s.0, "resolved goes forward: {ts} after {}", s.0);
        s.0 = ts;
    }

    /// Appends the rows of one transaction (all with `commit_ts`) and advances `resolved` to it.
    /// Transactions must come in commit-ts order; one at or below `resolved()` is ignored
    /// (a reader re-delivering after a restart).
    pub fn append_txn(&self, commit_ts: Ts, rows: &[RowEvent]) -> Result<(), StoreError> {
        if commit_ts <= self.resolved() {
            return Ok(());
        }
        self.push_rows(commit_ts, 0, rows.iter())?;
        self.resolve(commit_ts);
        Ok(())
    }

    /// Puts rows at `commit_ts` with positions from `first_seq` into their tables' open blocks,
    /// writing the blocks they fill in bounded write transactions, then notes them as written.
    fn push_rows<'r>(
        &self,
        commit_ts: Ts,
        first_seq: usize,
        rows: impl Iterator<Item = &'r RowEvent>,
    ) -> Result<(), StoreError> {
        let mut tables = Vec::new();
        {
            let mut tails = self.tails();
            let mut sealed: Vec<Sealed> = Vec::new();
            let mut sealed_bytes = 0;
            for (i, r) in rows.enumerate() {
                let at = block::at(commit_ts, seq_of(first_seq + i)?);
                let n = sealed.len();
                tails.push(r.table_id, at, r, &mut sealed);
                sealed_bytes += sealed[n..].iter().map(|s| s.2.len()).sum::<usize>();
                if tables.last() != Some(&r.table_id) {
                    tables.push(r.table_id);
                }
                let open = tails.drain_if_full();
                if sealed_bytes >= MAX_WRITE_BATCH_BYTES || !open.is_empty() {
                    sealed.extend(open);
                    self.write_blocks(&sealed, None)?;
                    (sealed, sealed_bytes) = (Vec::new(), 0);
                }
            }
            sealed.extend(tails.drain_if_full());
            self.write_blocks(&sealed, None)?;
        }
        let mut recent = self.recent();
        for t in tables {
            recent.note_rows(t, commit_ts);
        }
        Ok(())
    }

    /// Writes blocks (and, for a persist, `resolved`) in one write transaction, durable only
    /// with `resolved`. Called with the open blocks locked, so a scan sees each row once.
    fn write_blocks(&self, blocks: &[Sealed], resolved: Option<Ts>) -> Result<(), StoreError> {
        if blocks.is_empty() && resolved.is_none() {
            return Ok(());
        }
        let mut w = self.db.begin_write().map_err(db_err)?;
        if resolved.is_none() {
            w.set_durability(Durability::None).map_err(db_err)?;
        }
        {
            let mut t = w.open_table(BLOCKS).map_err(db_err)?;
            for (table, first, value) in blocks {
                t.insert(block_key(*table, *first).as_slice(), value.as_slice())
                    .map_err(db_err)?;
            }
            if let Some(ts) = resolved {
                let mut meta = w.open_table(META).map_err(db_err)?;
                meta.insert("resolved", ts).map_err(db_err)?;
            }
        }
        w.commit().map_err(db_err)
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
        let mut v = Vec::new();
        while i < rows.len() {
            let mut w = self.db.begin_write().map_err(db_err)?;
            w.set_durability(Durability::None).map_err(db_err)?;
            {
                let mut t = w.open_table(STAGE).map_err(db_err)?;
                let mut bytes = 0;
                while i < rows.len() && bytes < MAX_WRITE_BATCH_BYTES {
                    v.clear();
                    crate::codec::encode(&rows[i], &mut v);
                    bytes += v.len() + 12;
                    let seq = seq_of(first_seq + i)?;
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
        let mut after: Option<u32> = None;
        loop {
            let batch = self.staged_batch(start_ts, after, commit_time_ms)?;
            let Some(&(last, _)) = batch.last() else {
                break;
            };
            for (seq, _) in &batch {
                if *seq as usize != moved {
                    return Err(StoreError::Corrupt(format!(
                        "transaction at {start_ts}: staged row {seq} where {moved} was due"
                    )));
                }
                moved += 1;
            }
            let first = batch[0].0 as usize;
            self.push_rows(commit_ts, first, batch.iter().map(|(_, ev)| ev))?;
            after = Some(last);
        }
        if moved != staged_rows {
            return Err(StoreError::Corrupt(format!(
                "transaction at {start_ts} had {staged_rows} staged rows, found {moved}"
            )));
        }
        self.abort_staged()?;
        self.push_rows(commit_ts, staged_rows, rows.iter())?;
        self.resolve(commit_ts);
        Ok(())
    }

    /// Staged rows of the transaction started at `start_ts` after position `after`, up to
    /// [`MAX_WRITE_BATCH_BYTES`], with their commit time.
    fn staged_batch(
        &self,
        start_ts: Ts,
        after: Option<u32>,
        commit_time_ms: u64,
    ) -> Result<Vec<(u32, RowEvent)>, StoreError> {
        let lo = match after {
            None => stage_key(start_ts, 0),
            Some(u32::MAX) => return Ok(Vec::new()),
            Some(s) => stage_key(start_ts, s + 1),
        };
        let hi = stage_key(start_ts, u32::MAX);
        let r = self.db.begin_read().map_err(db_err)?;
        let stage = r.open_table(STAGE).map_err(db_err)?;
        let mut batch = Vec::new();
        let mut bytes = 0;
        for item in stage.range(lo.as_slice()..=hi.as_slice()).map_err(db_err)? {
            let (k, v) = item.map_err(db_err)?;
            let seq = k
                .value()
                .get(8..12)
                .and_then(|s| s.try_into().ok())
                .map(u32::from_be_bytes)
                .ok_or_else(|| StoreError::Corrupt("stage key".into()))?;
            let mut ev = crate::codec::decode(v.value()).map_err(StoreError::Corrupt)?;
            ev.commit_time_ms = commit_time_ms;
            bytes += v.value().len();
            batch.push((seq, ev));
            if bytes >= MAX_WRITE_BATCH_BYTES {
                break;
            }
        }
        Ok(batch)
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
        self.resolve(ddl.commit_ts);
        Ok(())
    }

    /// Advances `resolved` without data (the reader is idle at `ts`).
    pub fn advance(&self, ts: Ts) {
        let mut s = self.state();
        if ts > s.0 {
            s.0 = ts;
        }
    }

    /// Makes everything appended so far durable, including `resolved` (one fsync): the open
    /// blocks are written in the same transaction.
    pub fn persist(&self) -> Result<Ts, StoreError> {
        let mut tails = self.tails();
        let resolved = self.resolved();
        let blocks = tails.drain();
        self.write_blocks(&blocks, Some(resolved))?;
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
        let empty = ScanBatch {
            rows: vec![],
            next: None,
        };
        let gc = self.gc_ts();
        if from.ts < gc {
            return Err(StoreError::Collected { start: from.ts, gc });
        }
        let upto = upto.min(self.resolved());
        let Some(mut start) = block::just_after(from) else {
            return Ok(empty);
        };
        if gc > 0 {
            // A block that also holds later rows keeps rows at or below the GC point on disk:
            // never returned (also not to a cursor inside the transaction at it).
            start = start.max(block::at(gc.saturating_add(1), 0));
        }
        if start.ts > upto || self.recent().no_rows_after(span.table, from) {
            return Ok(empty);
        }
        let end = Cursor {
            ts: upto,
            seq: u32::MAX,
        };
        let mut c = scan::Collector::new(span, start, end, limit);
        let (read, tail) = {
            let tails = self.tails();
            if tails.first(span.table).is_some_and(|first| first <= start) {
                // Every row of the table from the start on is in memory.
                c.feed(tails.entries(span.table).unwrap_or_default())?;
                return Ok(c.finish());
            }
            // Begun with the open blocks locked: the disk and the copy of the tail hold each
            // row once.
            let read = self.db.begin_read().map_err(db_err)?;
            (read, tails.entries(span.table).map(<[u8]>::to_vec))
        };
        c.feed_disk(&read)?;
        if let (false, Some(t)) = (c.done(), tail) {
            c.feed(&t)?;
        }
        Ok(c.finish())
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

    /// Removes the events with commit ts `<= upto` (the minimum checkpoint of the node's
    /// changefeeds); scans must then start at or above `upto`. A block on disk that also holds
    /// later rows stays until a later GC passes its last row (no scan returns its earlier
    /// ones). Returns the rows removed.
    pub fn gc(&self, upto: Ts) -> Result<u64, StoreError> {
        if upto <= self.gc_ts() {
            return Ok(0);
        }
        let mut removed = 0u64;
        let w = self.db.begin_write().map_err(db_err)?;
        {
            let mut t = w.open_table(BLOCKS).map_err(db_err)?;
            for tid in tables_with_blocks(&t)? {
                let lo = block_key(tid, Cursor { ts: 0, seq: 0 });
                let hi = block_key(
                    tid,
                    Cursor {
                        ts: upto,
                        seq: u32::MAX,
                    },
                );
                t.retain_in(lo.as_slice()..=hi.as_slice(), |_, v| {
                    match block::header(v) {
                        Ok(h) if h.last.ts <= upto => {
                            removed += u64::from(h.rows);
                            false
                        }
                        _ => true,
                    }
                })
                .map_err(db_err)?;
            }
            let mut d = w.open_table(DDLS).map_err(db_err)?;
            d.retain_in(0..=upto, |_, _| false).map_err(db_err)?;
            let mut meta = w.open_table(META).map_err(db_err)?;
            meta.insert("gc", upto).map_err(db_err)?;
        }
        w.commit().map_err(db_err)?;
        removed += self.tails().gc(upto);
        {
            let mut recent = self.recent();
            recent.ddls = recent.ddls.split_off(&upto.saturating_add(1));
        }
        let mut s = self.state();
        assert!(upto > s.1, "the gc ts goes forward");
        s.1 = upto;
        Ok(removed)
    }
}

/// Drops every row above `resolved` (an append not followed by a persist before a crash): the
/// blocks that start above it (one range per table, so O(tables), not O(rows)), and the rows
/// above it in the block before them.
fn drop_above(
    blocks: &mut redb::Table<'_, &'static [u8], &'static [u8]>,
    resolved: Ts,
) -> Result<(), StoreError> {
    let Some(above) = resolved.checked_add(1) else {
        return Ok(());
    };
    for tid in tables_with_blocks(&*blocks)? {
        let lo = block_key(tid, Cursor { ts: above, seq: 0 });
        let hi = block_key(
            tid,
            Cursor {
                ts: Ts::MAX,
                seq: u32::MAX,
            },
        );
        blocks
            .retain_in(lo.as_slice()..=hi.as_slice(), |_, _| false)
            .map_err(db_err)?;
        let first = block_key(tid, Cursor { ts: 0, seq: 0 });
        let last = match blocks
            .range(first.as_slice()..lo.as_slice())
            .map_err(db_err)?
            .next_back()
        {
            Some(item) => {
                let (k, v) = item.map_err(db_err)?;
                (k.value().to_vec(), v.value().to_vec())
            }
            None => continue,
        };
        if block::header(&last.1)?.last.ts <= resolved {
            continue;
        }
        match block::rebuild(block::body(&last.1)?, |at| at.ts <= resolved)? {
            Some(b) => blocks.insert(last.0.as_slice(), b.seal().as_slice()),
            None => blocks.remove(last.0.as_slice()),
        }
        .map_err(db_err)?;
    }
    Ok(())
}
