//! Reading a span: the blocks on disk from the one holding the start, then the table's open
//! block in memory, collected into one [`ScanBatch`].
//!
//! Invariants:
//! - rows come in `(commit ts, seq)` order, each once: strictly after the cursor, at or below
//!   `upto`, inside the span;
//! - a batch stops at `limit` rows with `next` naming the position just before the first row
//!   not returned, so paging loses and repeats nothing;
//! - a block whose last row lies before the start is skipped by its header, not walked.

use super::block;
use super::Cursor;
use super::{db_err, ScanBatch, StoreError, BLOCKS};
use redb::ReadTransaction;
use sluice_types::{RowEvent, Span};

/// Rows of one span between two positions, up to a limit.
pub(super) struct Collector<'s> {
    span: &'s Span,
    /// First position wanted.
    start: Cursor,
    /// Last position wanted.
    end: Cursor,
    limit: usize,
    rows: Vec<RowEvent>,
    next: Option<Cursor>,
    /// A row past `end` or past the limit was met: nothing later is wanted.
    done: bool,
}

impl<'s> Collector<'s> {
    pub fn new(span: &'s Span, start: Cursor, end: Cursor, limit: usize) -> Collector<'s> {
        Collector {
            span,
            start,
            end,
            limit,
            rows: Vec::new(),
            next: None,
            done: false,
        }
    }

    pub fn done(&self) -> bool {
        self.done
    }

    /// Takes what `entries` (a block's body) holds for the span.
    pub fn feed(&mut self, entries: &[u8]) -> Result<(), StoreError> {
        for e in block::entries(entries) {
            let e = e?;
            if e.at < self.start {
                continue;
            }
            if e.at > self.end {
                self.done = true;
                return Ok(());
            }
            if !self.span.contains_bytes(e.key()?) {
                continue;
            }
            if self.rows.len() >= self.limit {
                self.next = Some(block::just_before(e.at));
                self.done = true;
                return Ok(());
            }
            self.rows.push(e.decode()?);
        }
        Ok(())
    }

    /// Takes a whole block from disk, skipped by its header when it ends before the start.
    fn feed_block(&mut self, value: &[u8]) -> Result<(), StoreError> {
        if block::header(value)?.last < self.start {
            return Ok(());
        }
        self.feed(block::body(value)?)
    }

    /// The blocks of the span's table on disk from the one that holds the start.
    pub fn feed_disk(&mut self, r: &ReadTransaction) -> Result<(), StoreError> {
        let t = match r.open_table(BLOCKS) {
            Ok(t) => t,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(()),
            Err(e) => return Err(db_err(e)),
        };
        let table = self.span.table;
        let lo = block::block_key(table, Cursor { ts: 0, seq: 0 });
        let start = block::block_key(table, self.start);
        let end = block::block_key(table, self.end);
        // The block that holds the start begins at or before it.
        let from = match t
            .range(lo.as_slice()..=start.as_slice())
            .map_err(db_err)?
            .next_back()
        {
            Some(item) => item.map_err(db_err)?.0.value().to_vec(),
            None => start.to_vec(),
        };
        for item in t.range(from.as_slice()..=end.as_slice()).map_err(db_err)? {
            let (_, v) = item.map_err(db_err)?;
            self.feed_block(v.value())?;
            if self.done {
                break;
            }
        }
        Ok(())
    }

    pub fn finish(self) -> ScanBatch {
        ScanBatch {
            rows: self.rows,
            next: self.next,
        }
    }
}
